"""No false alarms on RL traffic, and a short freeze still caught: ten minutes of rollouts on each engine with
the flight recorder's defaults, then the engine frozen for half a second during a step.

One fresh server per engine (vLLM 0.32, SGLang 0.5.23, TP=1, ``torch_profiler_dir`` and nothing else: the
recorder's defaults), room for a rollout (``tests/helpers/rollout.py``), ten minutes of RL steps: the trainer
marks a step a minute, and the step's rollouts run back to back, each sending every prompt at once (prompts
of a few to a few hundred tokens, responses of 12 to 192 with a long tail, mixed in every batch). At the end:
not one dump below the directory, every request answered. Then, on a new step, the engine process is frozen
(``SIGSTOP``) for 0.5 s in the middle of a rollout: a ``slow_iteration`` (or ``stall``) dump of that step
(a freeze that fell between two iterations holds none up and is tried again, three times at most). Last, a
requested dump, so silence is never a dead recorder. ``make test-extended`` (twenty minutes: beyond CI's 25);
its last run is in docs/performance.md, "Flight recorder".
"""

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from rlprof_plugins.cli.command import main as rlprof
from rlprof_plugins.metrics.flight_dump import flight_folders
from rlprof_plugins.step_logs.anomalies import read_anomalies
from tests.helpers import sglang_server
from tests.helpers.bursty import engine_pid
from tests.helpers.flight import mark, wait_anomalies
from tests.helpers.rollout import SGLANG_FLAGS, VLLM_FLAGS, rollout, rollout_plan
from tests.helpers.vllm_server import start_server

MINUTES = 10
FREEZE_S = 0.5


def rollouts(server, engine: str, minutes: int) -> int:
    """``minutes`` of RL steps, a step a minute, rollouts back to back; the requests answered."""
    answered = 0
    for minute in range(minutes):
        mark(server, 100 + minute)
        started = time.time()
        while time.time() < started + 60:
            plan = rollout_plan(seed=answered)  # every rollout its own mix of lengths
            rollout(server, engine, plan)
            answered += len(plan)
    mark(server, 100 + minutes)
    return answered


def freeze_caught(server, engine: str, names: tuple[str, ...], root: Path) -> dict:
    """The engine frozen for ``FREEZE_S`` during a rollout: the dump of that step."""
    pid = engine_pid(server, names)
    for trial in range(3):
        step = 200 + trial
        mark(server, step)
        traffic = threading.Thread(target=rollout, args=(server, engine, rollout_plan(seed=trial)))
        traffic.start()
        time.sleep(0.8)  # the rollout runs
        os.kill(pid, signal.SIGSTOP)
        time.sleep(FREEZE_S)
        os.kill(pid, signal.SIGCONT)
        traffic.join()
        found, _ = wait_anomalies(root / f"global_step_{step}", 1, timeout=5)
        if found:
            return found[0]
    raise AssertionError("three 0.5 s freezes during rollouts gave no dump")


def soak(server, engine: str, names: tuple[str, ...], root: Path) -> None:
    try:
        rollout(server, engine, rollout_plan(seed=-1))  # warm-up
        answered = rollouts(server, engine, MINUTES)
        assert answered > 100
        dumps = list(flight_folders(root))
        assert dumps == [], [read_anomalies(d.parent.parent) for d in dumps]
        caught = freeze_caught(server, engine, names, root)
        assert caught["reason"] in ("slow_iteration", "stall") and caught["duration_ms"] >= FREEZE_S * 1e3 * 0.9, \
            caught
        assert rlprof(["dump", "--url", server.url]) == 0  # the recorder is alive: silence was not a dead one
        found, _ = wait_anomalies(root / f"global_step_{caught['global_step']}", 2)
        assert sorted(a["reason"] for a in found) == sorted([caught["reason"], "requested"]), found
        print(f"{server.url}: {answered} requests in {MINUTES} minutes of rollouts, no dump; the freeze: "
              f"{caught['reason']} {caught['duration_ms']:.0f} ms against {caught['baseline_ms']:.1f} ms")
    finally:
        server.stop()


@pytest.mark.vllm
@pytest.mark.extended
def test_ten_minutes_of_rollouts_on_vllm_write_no_dump_and_a_freeze_one(tmp_path):
    root = tmp_path / "traces"
    soak(start_server(tmp_path, {"profiler": "torch", "torch_profiler_dir": str(root)}, extra=VLLM_FLAGS), "vllm",
         ("VLLM::Worker", "VLLM::EngineCore"), root)


@pytest.mark.extended
def test_ten_minutes_of_rollouts_on_sglang_write_no_dump_and_a_freeze_one(tmp_path):
    if not sglang_server.available():
        pytest.skip("SGLang environment (.venv-sglang) not built: make env")
    root = tmp_path / "traces"
    soak(sglang_server.start_server(tmp_path, {"torch_profiler_dir": str(root)}, extra=SGLANG_FLAGS), "sglang",
         ("sglang::schedul",), root)
