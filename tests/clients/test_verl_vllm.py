"""verl on vLLM, with and without rlprof: the trace files are complete when the stop returns.

Replays verl's in-process sequence (tests/clients/verl_vllm.py, which cites
verl's source) on the real vLLM 0.32 CPU engine, once as native vLLM
(``RLPROF_DISABLE=1``) and once with rlprof, at TP=1 and TP=2. verl moves
the files right after ``stop_profile()`` returns; both runs must have every
trace on disk at that instant (rlprof waits for its background export, up to
``stop_wait_seconds``, while the engine keeps serving).
"""

import sys
from pathlib import Path

import pytest

from tests.helpers.installed import TEST_PATH
from tests.helpers.scripts import script_result
from tests.helpers.traces import iteration_indices, load_trace
from tests.helpers.vllm_server import TINY_MODEL, cpu_env

SCRIPT = Path(__file__).with_name("verl_vllm.py")
REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.vllm


def replay(trace_dir: Path, tp: int, *, native: bool) -> dict:
    env = cpu_env(tp, PYTHONPATH=str(TEST_PATH), **({"RLPROF_DISABLE": "1"} if native else {}))
    return script_result([sys.executable, str(SCRIPT), str(TINY_MODEL), str(trace_dir), str(tp)], env=env, cwd=REPO,
                         timeout=500)


# rlprof's run at TP=1 (one worker in the EngineCore process) in `make test` (CI); the native twin (the same
# assertions with rlprof disabled: what vLLM itself guarantees, which changes only with the engine release) and
# TP=2, one trace per rank, in `make test-extended` with the other variants CI leaves out for time (a rank's trace
# each, at TP=2, in CI: tests/e2e/test_vllm_server_tp2.py).
CASES = [(1, "rlprof"), pytest.param(1, "native", marks=pytest.mark.extended),
         pytest.param(2, "rlprof", marks=pytest.mark.extended), pytest.param(2, "native", marks=pytest.mark.extended)]


@pytest.mark.parametrize("tp,side", CASES, ids=["1-rlprof", "1-native", "2-rlprof", "2-native"])
def test_files_are_on_disk_when_stop_returns(tmp_path, tp, side):
    run = replay(tmp_path / side, tp, native=side == "native")
    assert run["at_return"] == run["later"], f"{side}: written after stop_profile returned: {run}"
    workers = [f for f in run["at_return"] if "async_llm" not in f]
    assert len(workers) == tp, run  # one trace per rank, where verl looks (the configured folder)
    assert sum("async_llm" in f for f in run["at_return"]) == 1, run  # the API-server trace
    if side == "rlprof":  # rlprof's traces are its own (iteration ranges), at the top of the folder as vLLM names them
        for name in run["at_return"]:
            assert "/" not in name
            if "async_llm" not in name:
                assert len(iteration_indices(load_trace(tmp_path / side / name))) > 0
