"""Run the contract tests of each tested engine release (rlprof_plugins.cli.compatibility.TESTED).

Each release runs in its own interpreter: the engine's test environment
(.venv-vllm or .venv-sglang) with the release's unpacked wheel first on
``sys.path``. CI runs ``CI_SUBSET``; ``make compat`` (``RLPROF_COMPAT=all``)
runs every release.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rlprof_plugins.cli.compatibility import CI_SUBSET, TESTED
from tests.compat.releases import ROOT, contract_environment, ensure
from tests.helpers.installed import TEST_PATH

PYTHON = {
    "vllm": Path(os.environ.get("RLPROF_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python")),
    "sglang": Path(os.environ.get("RLPROF_SGLANG_PYTHON", ROOT / ".venv-sglang" / "bin" / "python")),
}
MATRIX = [(engine, version) for engine, versions in TESTED.items() for version in versions]


def run_contract(engine: str, version: str, *pytest_args: str) -> subprocess.CompletedProcess:
    path = ensure(engine, version)
    env = dict(os.environ, RLPROF_CONTRACT_ENGINE=engine, RLPROF_CONTRACT_VERSION=version, RLPROF_DISABLE="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(TEST_PATH), str(path) if path else "") if p),
               RLPROF_CONTRACT_PATH=str(path or ""), SGLANG_USE_CPU_ENGINE="1", HF_HUB_OFFLINE="1",
               VLLM_NO_USAGE_STATS="1", PYTHONWARNINGS="ignore", **contract_environment(engine, version))
    cmd = [str(PYTHON[engine]), "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(ROOT),
           str(ROOT / "tests" / "compat" / f"contract_{engine}.py"), *pytest_args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def selected(engine: str, version: str) -> bool:
    return (version in CI_SUBSET[engine] or os.environ.get("RLPROF_COMPAT") == "all") and PYTHON[engine].exists()


_RUNS: dict = {}
CONCURRENT = max(1, min(2, len(os.sched_getaffinity(0))))


def contract_run(engine: str, version: str):
    """The release's contract run. Every selected release is started at the
    first call, ``CONCURRENT`` at a time: each is one interpreter busy with
    imports on one core, so two cores run the matrix in about half the time."""
    if not _RUNS:
        pool = ThreadPoolExecutor(max_workers=CONCURRENT)
        _RUNS.update({(e, v): pool.submit(run_contract, e, v) for e, v in MATRIX if selected(e, v)})
        pool.shutdown(wait=False)
    return _RUNS[(engine, version)].result()


@pytest.mark.parametrize("engine,version", MATRIX, ids=[f"{e}-{v}" for e, v in MATRIX])
def test_release_contract(engine, version):
    if version not in CI_SUBSET[engine] and os.environ.get("RLPROF_COMPAT") != "all":
        pytest.skip("outside the CI subset; `make compat` runs the full matrix")
    if not PYTHON[engine].exists():
        pytest.skip(f"no {engine} test environment ({PYTHON[engine]}); `make env` builds it")
    result = contract_run(engine, version)
    tail = (result.stdout + result.stderr)[-6000:]
    sys.stdout.write(tail)
    assert result.returncode == 0, f"{engine} {version} contract failed:\n{tail}"
    assert " passed" in result.stdout
