"""rlprof's verl patches against verl 0.9.1's released source, in each engine's environment.

Runs ``contract_verl.py`` in the vLLM and SGLang interpreters with verl on
the path (``site``), side by side, and checks that verl's plugin switch
(``VERL_USE_EXTERNAL_PLUGINS``) and ``RLPROF_DISABLE`` leave verl unpatched.
"""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.verl import site

pytestmark = pytest.mark.skipif(not site.installed(), reason="make env builds .cache/verl-0.9.1")

ENGINES = ("vllm", "sglang")
MODULE = {"vllm": "verl.workers.rollout.vllm_rollout.vllm_async_server",
          "sglang": "verl.workers.rollout.sglang_rollout.async_sglang_server"}


def run(engine: str, args: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(site.PYTHON[engine]), *args], env=site.environment(engine, **env), cwd=site.REPO,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def contracts():
    import os

    extra = {k: os.environ[k] for k in ("RLPROF_UPDATE_SHAPES",) if k in os.environ}
    args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(site.REPO),
            "tests/verl/contract_verl.py"]
    with ThreadPoolExecutor(max_workers=1 if extra else 2) as pool:  # updating: one writer of the record
        futures = {e: pool.submit(run, e, args, RLPROF_VERL_CONTRACT=e, PYTHONWARNINGS="ignore", **extra)
                   for e in ENGINES}
        return {e: f.result() for e, f in futures.items()}


@pytest.mark.parametrize("engine", ENGINES)
def test_contract(contracts, engine):
    proc = contracts[engine]
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert " passed" in proc.stdout and "skipped" not in proc.stdout, proc.stdout[-2000:]


SWITCHES = ({"VERL_USE_EXTERNAL_PLUGINS": "none"}, {"VERL_USE_EXTERNAL_PLUGINS": "other"}, {"RLPROF_DISABLE": "1"},
            {"VERL_USE_EXTERNAL_PLUGINS": "rlprof"}, {})


@pytest.mark.extended  # CI's 25 minutes: the switches themselves run in tests/vllm/test_plugin_loading.py
def test_switches_leave_verl_unpatched():
    probe = (f"import {MODULE['sglang']} as m; "
             "print('PATCHED', hasattr(m.SGLangHttpServer.start_profile, '__wrapped__'))")
    with ThreadPoolExecutor(max_workers=2) as pool:
        procs = list(pool.map(lambda switch: run("sglang", ["-c", probe], **switch), SWITCHES))
    for switch, proc in zip(SWITCHES, procs):
        assert proc.returncode == 0, proc.stderr[-3000:]
        wanted = switch.get("VERL_USE_EXTERNAL_PLUGINS", "auto") in ("auto", "rlprof") and "RLPROF_DISABLE" not in switch
        assert f"PATCHED {wanted}" in proc.stdout, (switch, proc.stdout[-500:], proc.stderr[-2000:])
