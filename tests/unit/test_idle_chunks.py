"""A chunked recording does not record an idle engine (issue 43).

With Python stacks on, an engine waiting for work records its own wait loop
(vLLM's worker spins on ``sched_yield``, SGLang's scheduler busy-polls):
millions of events a second, seconds of torch post-processing per stop. The
engines' idle hooks call ``ProfilerController.idle``: the running chunk ends
there (an ``idle`` pause) and the next starts with the next iteration (a
``resume`` pause). The real controller, torch.profiler and exporter; the
wait loop is a Python spin like vLLM's."""

import os
import time
from pathlib import Path

import pytest

from rlprof_plugins.session.chunk_plan import HEADROOM, PRIOR_IDLE_SECONDS, PRIOR_SECONDS, ChunkPlan, StopCosts
from tests.helpers.traces import load_trace, pause_events, profiler_steps, python_frames
from tests.unit.test_chunk_plan import STACKS
from tests.unit.test_chunks import stacks_backend, workload
from tests.unit.test_session import make_controller, settle, start


def spin(seconds: float) -> int:
    """An engine waiting for work the way vLLM's worker does: Python calls and sched_yield."""
    spins, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        os.sched_yield()
        spins += 1
    return spins


def yields_in(trace: dict) -> int:
    return sum(1 for e in trace["traceEvents"] if "sched_yield" in e.get("name", ""))


def bursts(ctl, n: int, gap: float, idle_hook: bool) -> None:
    """``n`` bursts of 4 iterations, each followed by ``gap`` seconds of waiting;
    ``idle_hook``: the engine says when it is about to wait, as the patched engines do."""
    for _ in range(n):
        workload(ctl, 4)
        if idle_hook:
            ctl.idle()
        spin(gap)


def session(tmp_path: Path, step: int, *, chunk, idle_hook: bool, engine_idle: bool = False) -> tuple[dict, dict]:
    ctl = make_controller(tmp_path, stacks_backend)
    extra = {"engine_idle": True} if engine_idle else {}
    assert start(ctl, global_step=step, chunk_iterations=chunk, **extra)["ok"]
    if engine_idle:
        spin(0.2)  # the engine waits a while before traffic comes
    bursts(ctl, 3, 0.1, idle_hook)
    assert ctl.handle({"op": "stop"})["ok"]
    status = settle(ctl, step)
    ctl.shutdown()
    assert status["state"] == "done", status
    return status, load_trace(Path(status["files"][0]))


def test_an_idle_engine_is_not_recorded_and_every_iteration_is(tmp_path):
    _, one = session(tmp_path / "one", 1, chunk=0, idle_hook=True)  # one torch session records the waits
    status, parked = session(tmp_path / "auto", 2, chunk="auto", idle_hook=True, engine_idle=True)
    assert profiler_steps(parked) == profiler_steps(one) == list(range(12))
    assert python_frames(parked) > 0
    # the waits (0.5 s of spinning) are in the one-session trace, not in the parked one
    assert yields_in(one) > 50 * max(yields_in(parked), 1), (yields_in(one), yields_in(parked))
    causes = [p["args"]["cause"] for p in pause_events(parked)]
    # parked at the start (the engine said it was idle), then at every burst's end; a fresh profiler at each burst
    assert causes[0] == "idle" and causes.count("resume") == 3 and causes.count("idle") == 4, causes
    assert "stop" not in causes  # the stop found no profiler running: the last chunk ended when the engine waited
    assert status["stops"] == causes.count("idle") + causes.count("rotation")


def test_without_the_idle_hook_the_plan_prices_idle_time(tmp_path):
    """An engine without an idle hook: each chunk's idle seconds count in its price, so a chunk that waited
    long ends at the next iteration boundary instead of growing (a burst is iterations 4k..4k+3, then a wait).

    Certain for the first wait: a fresh controller prices an idle second at the prior (10 s of stop with
    stacks on), so its 0.1 s wait costs 1 s, past the 100 ms target, and the chunk ends as iteration 4 begins.
    The later waits are priced at what the plan measured since, which follows the host (a ``sched_yield`` spin
    beside a CPU-bound neighbour records fewer calls), so whether they end a chunk is not certain; that each is
    counted in the price of the chunk that held it is."""
    status, trace = session(tmp_path, 3, chunk="auto", idle_hook=False)
    pauses = pause_events(trace)
    first = next(p for p in pauses if p["args"]["cause"] == "rotation")
    assert first["args"]["last_iteration"] == 3, [p["args"] for p in pauses]
    gap_ms = 1e3 * 0.1  # ``bursts``' wait
    assert first["args"]["idle_ms"] >= gap_ms
    assert first["args"]["planned_ms"] >= PRIOR_IDLE_SECONDS[True] * gap_ms >= 1e3 * 0.2 * HEADROOM
    for wait_after in (7, 11):  # the chunk that held the wait after this iteration priced it
        (holder,) = [p for p in pauses if p["args"].get("first_iteration") is not None
                     and p["args"]["first_iteration"] <= wait_after <= p["args"]["last_iteration"]]
        assert holder["args"]["idle_ms"] >= gap_ms, holder["args"]
    assert profiler_steps(trace) == list(range(12))


def test_a_stop_with_no_traffic_after_an_idle_start_still_writes_a_trace(tmp_path):
    """vLLM's promise: recording starts with the request, and a stop with nothing in between yields a trace."""
    ctl = make_controller(tmp_path, stacks_backend)
    assert start(ctl, global_step=4, chunk_iterations="auto", engine_idle=True)["ok"]
    spin(0.1)
    assert ctl.handle({"op": "stop"})["ok"]
    status = settle(ctl, 4)
    ctl.shutdown()
    assert status["state"] == "done" and len(status["files"]) == 1, status
    trace = load_trace(Path(status["files"][0]))
    assert profiler_steps(trace) == [] and yields_in(trace) == 0
    assert not (tmp_path / "global_step_4" / ".rlprof-chunks").exists()


def test_each_chunk_is_written_as_soon_as_it_stopped(tmp_path):
    """Memory bounded by one chunk: a parked chunk leaves the process before the session ends."""
    ctl = make_controller(tmp_path, stacks_backend)
    assert start(ctl, global_step=5, chunk_iterations="auto")["ok"]
    workload(ctl, 3)
    ctl.idle()
    chunks = tmp_path / "global_step_5" / ".rlprof-chunks"
    deadline = time.time() + 30
    def written() -> list:  # whole chunk files, not one still being written (``*.tmp``)
        return [p for p in chunks.glob("*.json*") if not p.name.endswith(".tmp")]

    while not written() and time.time() < deadline:
        time.sleep(0.05)
    assert len(written()) == 1, written()  # while the session is still recording
    assert ctl.handle({"op": "status"})["session"]["state"] == "recording"
    recording = ctl._recording
    assert recording is not None and recording.chunks.stopped == []  # the stopped profiler was released
    workload(ctl, 2)
    ctl.handle({"op": "stop"})
    status = settle(ctl, 5)
    ctl.shutdown()
    assert profiler_steps(load_trace(Path(status["files"][0]))) == list(range(5))


def test_one_torch_session_is_never_parked(tmp_path):
    ctl = make_controller(tmp_path, stacks_backend)
    assert start(ctl, global_step=6, chunk_iterations=0, engine_idle=True)["ok"]
    workload(ctl, 2)
    ctl.idle()
    workload(ctl, 2)
    ctl.handle({"op": "stop"})
    status = settle(ctl, 6)
    ctl.shutdown()
    assert status["stops"] == 1
    assert [p["args"]["cause"] for p in pause_events(load_trace(Path(status["files"][0])))] == ["stop"]


def test_the_rates_of_an_iteration_and_an_idle_second_are_learned_apart():
    costs = StopCosts()
    per_iteration, per_idle_second = 0.004, 2.0
    for n, idle in ((10, 0.01), (5, 0.05), (20, 0.0), (8, 0.1)):
        costs.learn(STACKS, per_iteration * n + per_idle_second * idle, n, idle)
    a, c = costs.rates(STACKS)
    assert a == pytest.approx(per_iteration) and c == pytest.approx(per_idle_second)
    plan = ChunkPlan("auto", 100, costs, STACKS, streaming=True)
    assert plan.length() == int(0.1 * HEADROOM / per_iteration)
    assert not plan.due(5, 0.0) and plan.due(5, 0.03)  # 20 ms + 60 ms passes 50 ms
    assert StopCosts().rates(STACKS) == (PRIOR_SECONDS[True], pytest.approx(10.0))
