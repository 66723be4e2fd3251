"""verl on SGLang, in process, with and without rlprof.

Replays verl's SGLang sequence (tests/clients/verl_sglang.py, which cites
verl's source) on the real SGLang 0.5.23 CPU engine (``sglang.Engine``):
native SGLang (``RLPROF_DISABLE=1``) refuses verl's keyword call with
``TypeError`` since 0.5.15; with rlprof (configured through
``RLPROF_PROFILER_CONFIG``, as a framework that builds the engine itself
can) the call records an rlprof session and, when ``stop_profile()``
returns, the trace is in the folder verl reads.
"""

import json
from pathlib import Path

import pytest

from tests.helpers.installed import TEST_PATH
from tests.helpers.scripts import script_result
from tests.helpers.traces import iteration_indices, load_trace

# `make test-extended` (CI's 25 minutes: docs/testing.md). CI runs verl's keyword call and `sglang.Engine` against
# each CI release's own TokenizerManager (tests/compat, the SGLang contracts) and verl's modules with SGLang
# (tests/verl/test_verl_contract.py).
pytestmark = pytest.mark.extended

SCRIPT = Path(__file__).with_name("verl_sglang.py")
REPO = Path(__file__).resolve().parents[2]


def replay(out: Path, env: dict) -> dict:
    from tests.helpers.sglang_server import SGLANG_PYTHON, available, cpu_env
    from tests.helpers.vllm_server import TINY_MODEL

    if not available():
        pytest.skip("SGLang environment (.venv-sglang) not built")
    return script_result([str(SGLANG_PYTHON), str(SCRIPT), str(TINY_MODEL), str(out)],
                         env=cpu_env(PYTHONPATH=str(TEST_PATH), **env), cwd=REPO, timeout=500, check=False)


def test_verl_keyword_call_records_and_stop_returns_with_the_files(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    out = tmp_path / "rlprof"
    with ThreadPoolExecutor(max_workers=2) as pool:  # the two engines side by side: about half the wall time
        native = pool.submit(replay, tmp_path / "native", {"RLPROF_DISABLE": "1"})
        ours = pool.submit(replay, out, {"RLPROF_PROFILER_CONFIG": json.dumps({"torch_profiler_dir": str(out),
                                                                                 "torch_profiler_with_stack": False})})
        native, ours = native.result(), ours.result()
    assert native["start"].startswith("TypeError"), native  # SGLang 0.5.23 takes a ProfileReq only
    assert ours["start"] == "ok", ours
    assert ours["at_return"] == ours["later"] and len(ours["at_return"]) == 1, ours
    (name,) = ours["at_return"]
    assert name.startswith("TP-0.") and "/" not in name  # in the folder verl passed, SGLang's rank name
    assert len(iteration_indices(load_trace(out / name))) == 6  # 1 prefill + 5 decodes for 6 tokens
