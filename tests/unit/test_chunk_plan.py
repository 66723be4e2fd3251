"""When a chunk ends (``chunk_iterations``, ``max_pause_ms``, ``max_recording_mb``).

``auto`` records each busy stretch as one chunk, ended at the engine's waits
and its memory budget; a session begun while the engine streams has its
chunks sized by what their stop costs. The plan is checked with given costs
(deterministic), then real sessions through the controller with the real
torch.profiler backend: the chunks they cut are read back from the pauses in
the written trace."""

from pathlib import Path

import pytest

from rlprof_plugins.config.options import CHUNK_AUTO, DEFAULT_MAX_PAUSE_MS, ProfileOptions, parse_options
from rlprof_plugins.config.requests import parse_start
from rlprof_plugins.errors import OptionsError, RequestError
from rlprof_plugins.session.chunk_plan import HEADROOM, MAX_GROWTH, PRIOR_IDLE_SECONDS, PRIOR_SECONDS, ChunkPlan, StopCosts
from tests.helpers.traces import load_trace, pause_events, profiler_steps
from tests.unit.test_chunks import stacks_backend, workload
from tests.unit.test_requests import server
from tests.unit.test_session import make_controller, settle, start

STACKS = (True, False, False, ("CPU",))
PLAIN = (False, False, False, ("CPU",))


def test_before_any_stop_the_prior_sizes_the_first_chunk():
    plan = ChunkPlan(CHUNK_AUTO, 200, StopCosts(), STACKS, streaming=True)
    assert plan.length() == int(0.2 * HEADROOM / PRIOR_SECONDS[True])  # planned with headroom under the target
    assert ChunkPlan(CHUNK_AUTO, 200, StopCosts(), PLAIN, streaming=True).length() == int(0.2 * HEADROOM / PRIOR_SECONDS[False])
    assert not plan.due(plan.length() - 1) and plan.due(plan.length())


def test_measured_costs_size_the_next_chunk_and_growth_is_bounded():
    costs = StopCosts()
    plan = ChunkPlan(CHUNK_AUTO, 100, costs, STACKS, streaming=True)
    plan.learn(0.010, 10, rotated=True)  # 1 ms an iteration: 50 would fit, but at most twice the last chunk
    assert plan.length() == 10 * MAX_GROWTH
    plan.learn(0.100, 20, rotated=True)  # 3.7 ms an iteration (iteration-weighted): 13 fit under twice 20
    assert plan.length() == int(0.1 * HEADROOM / ((0.010 + 0.100) / 30)) == 13
    plan.learn(0.500, 25, rotated=True)  # the estimate rises, chunks shorten
    assert plan.length() == int(0.1 * HEADROOM / ((0.010 + 0.100 + 0.500) / 55))
    assert ChunkPlan(CHUNK_AUTO, 100, costs, PLAIN, streaming=True).length() == int(0.1 * HEADROOM / PRIOR_SECONDS[False])


def test_a_stop_holding_no_iteration_teaches_nothing_and_never_less_than_one():
    costs = StopCosts()
    costs.learn(STACKS, 5.0, 0)
    assert costs.per_iteration(STACKS) == PRIOR_SECONDS[True]
    plan = ChunkPlan(CHUNK_AUTO, 1, costs, STACKS, streaming=True)
    plan.learn(1.0, 1, rotated=True)
    assert plan.length() == 1


def test_a_stop_holding_no_iteration_and_a_moment_of_waiting_teaches_no_rate_of_waiting():
    """A session started on an idle engine parks its first chunk at once: a stop's fixed cost over the
    few milliseconds it ran is no price of an idle second (read as one, it cut the first burst's chunks
    to a few iterations). A chunk that recorded the engine waiting for long enough does teach it."""
    costs = StopCosts()
    costs.learn(PLAIN, 0.003, 0, 0.002)
    assert costs.rates(PLAIN) == (PRIOR_SECONDS[False], PRIOR_IDLE_SECONDS[False])
    costs.learn(PLAIN, 0.2, 0, 2.0)
    assert costs.rates(PLAIN) == (PRIOR_SECONDS[False], pytest.approx(0.1))


def test_a_fixed_count_and_zero():
    assert ChunkPlan(8, 1, StopCosts(), STACKS).length() == 8
    never = ChunkPlan(0, 1, StopCosts(), STACKS)
    assert never.length() is None and not never.due(10 ** 6)
    assert (ChunkPlan(8, 1, StopCosts(), STACKS).rule, never.rule) == ("count", "none")


def test_auto_on_an_engine_that_waits_between_its_work_never_rotates_for_pauses():
    """A session begun on an engine that waited (a rollout about to start) records each busy stretch as one
    chunk: no pause-priced rotation, however low max_pause_ms and however costly earlier stops were. Begun on
    an engine that has not waited (streaming), the same costs size its chunks."""
    costs = StopCosts()
    costs.learn(STACKS, 5.0, 1)
    plan = ChunkPlan(CHUNK_AUTO, 1, costs, STACKS, max_recording_mb=1024)
    assert plan.rule == "idle" and plan.length() is None and not any(plan.due(n, 60.0) for n in (1, 100, 100_000))
    streaming = ChunkPlan(CHUNK_AUTO, 1, costs, STACKS, streaming=True)
    assert streaming.rule == "pause" and streaming.due(1)
    assert ChunkPlan(4, 1, costs, STACKS, streaming=True).rule == "count"  # a count the user set is kept


def test_auto_is_the_default_and_bad_values_name_their_field(tmp_path):
    options = parse_options({})
    assert (options.chunk_iterations, options.max_pause_ms) == (CHUNK_AUTO, DEFAULT_MAX_PAUSE_MS)
    assert parse_options({"chunk_iterations": 16, "max_pause_ms": 50}).max_pause_ms == 50
    request = parse_start({}, server(tmp_path))
    assert (request.chunk_iterations, request.max_pause_ms) == (CHUNK_AUTO, DEFAULT_MAX_PAUSE_MS)
    srv = server(tmp_path, defaults=ProfileOptions(chunk_iterations=8, max_pause_ms=30))
    assert (parse_start({"chunk_iterations": "auto", "max_pause_ms": 5}, srv).max_pause_ms,
            parse_start({}, srv).max_pause_ms) == (5, 30)
    for field, value in (("chunk_iterations", -1), ("chunk_iterations", "x"), ("chunk_iterations", True),
                         ("max_pause_ms", 0), ("max_pause_ms", -3), ("max_pause_ms", "auto")):
        with pytest.raises(RequestError) as e:
            parse_start({field: value}, server(tmp_path))
        assert e.value.field == field, (field, value)
        with pytest.raises(OptionsError) as o:
            parse_options({field: value})
        assert o.value.key == field


def auto_session(tmp_path: Path, step: int, n: int, max_pause_ms: int, ctl=None) -> tuple[dict, list[dict]]:
    ctl = ctl or make_controller(tmp_path, stacks_backend)
    assert start(ctl, global_step=step, step_end=n, chunk_iterations="auto", max_pause_ms=max_pause_ms)["ok"]
    workload(ctl, n)
    status = settle(ctl, step)
    trace = load_trace(Path(status["files"][0]))
    assert status["state"] == "done" and sorted(profiler_steps(trace)) == list(range(n)), status
    return status, pause_events(trace)


def test_a_session_whose_stop_stays_under_the_target_never_rotates(tmp_path):
    status, pauses = auto_session(tmp_path, 1, 12, max_pause_ms=600_000)
    assert status["stops"] == 1 and [p["args"]["cause"] for p in pauses] == ["stop"]
    assert (status["chunk_iterations"], status["max_pause_ms"]) == ("auto", 600_000)


def test_auto_cuts_chunks_by_measured_cost_and_learns_across_sessions(tmp_path):
    ctl = make_controller(tmp_path, stacks_backend)
    status, pauses = auto_session(tmp_path, 1, 12, max_pause_ms=1, ctl=ctl)  # every stop costs more than 1 ms
    held = [p["args"]["iterations"] for p in pauses]
    assert status["stops"] == len(pauses) > 1 and sum(held) == 12, held
    assert held[0] == 1  # the prior: 12 ms an iteration with stacks, over 1 ms
    assert all(b <= a * MAX_GROWTH for a, b in zip(held, held[1:-1])), held
    costs = StopCosts()  # the next session's first chunk comes from this session's pauses
    for p in pauses:
        costs.learn(STACKS, p["dur"] / 1e6, p["args"]["iterations"])
    expected = max(1, int(0.001 / costs.per_iteration(STACKS)))
    _, again = auto_session(tmp_path, 2, 6, max_pause_ms=1, ctl=ctl)
    assert again[0]["args"]["iterations"] == min(expected, 6), (expected, again)
    ctl.shutdown()


def test_a_chunk_ends_once_the_process_grew_by_its_budget(monkeypatch):
    from rlprof_plugins.session import chunk_plan
    from rlprof_plugins.session.chunk_plan import BUDGET_CHECK_EVERY, RunningChunk

    resident = [1000 << 20]
    reads = []
    monkeypatch.setattr(chunk_plan, "resident_bytes", lambda: reads.append(1) or resident[0])
    plan = ChunkPlan(CHUNK_AUTO, 200, StopCosts(), PLAIN, max_recording_mb=64)
    assert not ChunkPlan(0, 200, StopCosts(), PLAIN, max_recording_mb=64).over_budget(RunningChunk())  # one session
    chunk = RunningChunk()
    chunk.enter(0)
    assert not plan.over_budget(chunk) and chunk.resident_at_start == 1000 << 20  # the first read: the start
    resident[0] += 63 << 20
    for k in range(1, BUDGET_CHECK_EVERY + 1):
        chunk.enter(k)
        assert not plan.over_budget(chunk)
    resident[0] += 1 << 20
    for k in range(BUDGET_CHECK_EVERY + 1, 2 * BUDGET_CHECK_EVERY):
        chunk.enter(k)
        assert not plan.over_budget(chunk)  # read only every BUDGET_CHECK_EVERY iterations
    chunk.enter(2 * BUDGET_CHECK_EVERY)
    assert plan.over_budget(chunk)
    assert len(reads) == 3  # one read per BUDGET_CHECK_EVERY iterations, not one per iteration


def test_an_auto_session_on_a_waiting_engine_is_one_chunk_per_busy_stretch_and_its_budget_rotates_in_place(
        tmp_path, monkeypatch):
    """The real controller and torch backend: an ``auto`` session started on an idle engine (``engine_idle``, as
    vLLM's engine core says it) records its busy stretch as one torch session however low ``max_pause_ms`` is:
    parked at once (the engine waits), resumed by the first iteration, stopped at the window's end. With the
    process's memory growing past ``max_recording_mb`` (read through a stand-in for /proc), its chunk ends on the
    engine thread, the next starts at once, every iteration is recorded, and the trace says why it paused."""
    from rlprof_plugins.backends.torch_profiler import TorchProfilerBackend, TorchSettings
    from rlprof_plugins.session import chunk_plan
    from rlprof_plugins.trace.format.pauses import BUDGET

    plain = lambda table, overrides=None: TorchProfilerBackend(TorchSettings())  # noqa: E731
    ctl = make_controller(tmp_path, plain)
    assert start(ctl, global_step=1, step_end=40, chunk_iterations="auto", max_pause_ms=1, engine_idle=True)["ok"]
    workload(ctl, 40)
    one = settle(ctl, 1)
    trace = load_trace(Path(one["files"][0]))
    assert one["state"] == "done" and one["chunking"] == "idle", one
    assert [p["args"]["cause"] for p in pause_events(trace)] == ["idle", "resume", "stop"]
    assert sorted(profiler_steps(trace)) == list(range(40))

    resident = [1 << 30]

    def growing() -> int:  # every read finds the process 8 MB larger
        resident[0] += 8 << 20
        return resident[0]

    monkeypatch.setattr(chunk_plan, "resident_bytes", growing)
    assert start(ctl, global_step=2, step_end=200, chunk_iterations="auto", max_recording_mb=8,
                 engine_idle=True)["ok"]
    workload(ctl, 200)
    status = settle(ctl, 2)
    ctl.shutdown()
    assert status["state"] == "done" and status["files"], status
    trace = load_trace(Path(status["files"][0]))
    causes = [p["args"]["cause"] for p in pause_events(trace)]
    assert causes.count(BUDGET) >= 2 and "rotation" not in causes, causes
    assert sorted(profiler_steps(trace)) == list(range(200)) and status["iterations_recorded"] == 200, status


def test_an_auto_session_begun_under_traffic_has_its_chunks_sized_by_their_pause(tmp_path):
    """No wait seen since the start (async RL's streams): the same session's chunks end by their predicted
    pause, the status says so, and the next session begun on a waiting engine is one chunk again."""
    ctl = make_controller(tmp_path, stacks_backend)
    assert start(ctl, global_step=1, step_end=12, chunk_iterations="auto", max_pause_ms=1)["ok"]
    workload(ctl, 12)
    streaming = settle(ctl, 1)
    causes = [p["args"]["cause"] for p in pause_events(load_trace(Path(streaming["files"][0])))]
    assert streaming["chunking"] == "pause" and causes.count("rotation") >= 2, (streaming, causes)
    assert start(ctl, global_step=2, step_start=1, step_end=12, chunk_iterations="auto", max_pause_ms=1)["ok"]
    ctl.idle()  # the engine waits before the window's first iteration
    workload(ctl, 12)
    waited = settle(ctl, 2)
    causes = [p["args"]["cause"] for p in pause_events(load_trace(Path(waited["files"][0])))]
    ctl.shutdown()
    assert waited["chunking"] == "idle" and "rotation" not in causes, (waited, causes)
