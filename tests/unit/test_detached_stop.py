"""torch's stop off the engine thread (issue 57; ``backends/detached_stop.py``).

The real torch profiler, backend, controller and exporter: a stop returns to the engine thread while
torch still post-processes on a thread of its own without the GIL, the trace written is the one torch's
own stop writes, the next session waits for an ended one, the chunk plan learns what the post-processing
cost, and where it cannot run (not a verified torch, a GPU activity, the operator's switch) torch's own
stop runs as before."""

import collections
import threading
from pathlib import Path

import pytest
import torch

from rlprof_plugins.backends import detached_stop
from rlprof_plugins.backends.torch_profiler import TorchProfilerBackend, TorchSettings
from rlprof_plugins.session.chunk_plan import ChunkPlan, StopCosts, recording_kind
from rlprof_plugins.session.recording import Recording
from rlprof_plugins.store.layout import Placement
from tests.helpers.traces import load_trace, pause_events, profiler_steps
from tests.unit.test_session import make_controller, settle, start

pytestmark = pytest.mark.skipif(detached_stop.why_not(torch, ("CPU",)) is not None,
                                reason=f"no detached stop here: {detached_stop.why_not(torch, ('CPU',))}")

X = torch.randn(32, 32)


def operators(n: int) -> None:
    for _ in range(n):
        X[1:5].transpose(0, 1).reshape(-1).unsqueeze(0) * 2  # ten operators or so


def recorded(backend: TorchProfilerBackend, tmp_path: Path, name: str) -> dict:
    files = backend.export(Placement(tmp_path, False), name)
    return load_trace(files[0].path)


def op_counts(trace: dict) -> collections.Counter:
    return collections.Counter(e["name"] for e in trace["traceEvents"] if e.get("cat") == "cpu_op")


def test_the_engine_thread_runs_while_torch_post_processes_and_the_trace_is_torchs(tmp_path, monkeypatch):
    backend = TorchProfilerBackend(TorchSettings(use_gzip=False))
    backend.start()
    with backend.annotation("rlprof::iteration 0"):
        operators(3000)
    backend.stop()
    assert backend.detached
    ran = 0
    while backend.stop_seconds() is None:  # the engine thread holds the GIL and runs Python meanwhile
        ran += 1
    assert ran > 100, ran
    detached = recorded(backend, tmp_path, "detached")

    monkeypatch.setenv(detached_stop.OFF_ENV, "1")  # the operator's switch: torch's own stop, here
    native = TorchProfilerBackend(TorchSettings(use_gzip=False))
    native.start()
    with native.annotation("rlprof::iteration 0"):
        operators(3000)
    native.stop()
    assert not native.detached and native.stop_seconds() is None
    own = recorded(native, tmp_path, "native")
    assert op_counts(detached) == op_counts(own) and op_counts(own)["aten::transpose"] == 3000
    assert detached["rlprof_python_stacks"] == own["rlprof_python_stacks"] == "off"  # metadata kept
    threads = {e["tid"] for e in detached["traceEvents"] if e.get("cat") == "cpu_op"}
    assert threads == {threading.get_native_id()}, threads  # all threads recorded: only this one ran operators


def test_the_next_session_waits_for_an_ended_one_and_both_are_whole(tmp_path):
    first = TorchProfilerBackend(TorchSettings(use_gzip=False))
    first.start()
    operators(2000)
    first.stop()
    second = TorchProfilerBackend(TorchSettings(use_gzip=False))
    second.start()  # torch's profiler is one a process: waits for the first's post-processing
    assert first.stop_seconds() is not None
    operators(100)
    second.stop()
    writer = threading.Thread(target=lambda: recorded(first, tmp_path, "first"))
    writer.start()  # the first written while the second post-processes
    two = recorded(second, tmp_path, "second")
    writer.join()
    one = load_trace(next(tmp_path.glob("first.*")))
    assert op_counts(one)["aten::transpose"] == 2000 and op_counts(two)["aten::transpose"] == 100


def test_the_chunk_plan_learns_from_rotations_not_from_a_detached_stops_moment(tmp_path):
    """A stop at idle that left the engine thread cost it a moment and teaches the plan nothing; a
    rotation stops in place, on the engine thread, and its pause is what the plan learns."""
    costs = StopCosts()
    backend = TorchProfilerBackend(TorchSettings(use_gzip=False))
    kind = recording_kind(backend)
    assert kind[-1] is True and recording_kind(TorchProfilerBackend(TorchSettings(with_stack=True)))[-1] is False
    plan = ChunkPlan("auto", 200, costs, kind)
    recording = Recording.of_rank(backend, tmp_path, step=False, name="rank0", rank="0", plan=plan)
    recording.start()

    def iterations(first: int) -> None:
        for index in range(first, first + 5):
            recording.enter_iteration(index, None)
            operators(600)
            recording.leave_iteration()

    iterations(0)
    recording.park()
    assert backend.detached and costs.rates(kind) == StopCosts().rates(kind)  # the prior still
    rotated = TorchProfilerBackend(TorchSettings(use_gzip=False))
    recording.resume(rotated)
    iterations(5)
    recording.rotate(TorchProfilerBackend(TorchSettings(use_gzip=False)))
    assert not rotated.detached  # stopped in place
    assert costs.per_iteration(kind) == pytest.approx(recording.pauses[-1].seconds / 5)
    recording.stop()
    recording.chunks.write_all()


def test_where_it_cannot_run_torchs_own_stop_runs(monkeypatch):
    assert "only CPU" in detached_stop.why_not(torch, ("CPU", "CUDA"))
    monkeypatch.setattr(detached_stop, "_FOUND", {"why": "torch 2.99 is not among the verified releases"})
    backend = TorchProfilerBackend(TorchSettings())
    backend.start()
    operators(10)
    backend.stop()
    assert not backend.detached
    exact = TorchProfilerBackend(TorchSettings(with_stack=True))  # exact stacks: torch's binding builds them
    assert exact._experimental_config() == (None, False)


def test_a_chunked_session_at_idle_pauses_the_engine_a_moment_and_records_every_iteration(tmp_path):
    ctl = make_controller(tmp_path)
    assert start(ctl, global_step=3, chunk_iterations="auto")["ok"]
    for _ in range(3):
        for _ in range(4):
            ctl.begin_iteration(None)
            operators(150)
            ctl.end_iteration()
        ctl.idle()  # the engine is about to wait: the chunk ends there, detached
    assert ctl.handle({"op": "stop"})["ok"]
    status = settle(ctl, 3)
    ctl.shutdown()
    assert status["state"] == "done", status
    trace = load_trace(Path(status["files"][0]))
    assert profiler_steps(trace) == list(range(12))
    assert op_counts(trace)["aten::transpose"] == 12 * 150
    idle = [p for p in pause_events(trace) if p["args"]["cause"] == "idle"]
    assert len(idle) == 3


def test_doctor_says_where_torchs_stop_runs(monkeypatch):
    from rlprof_plugins.cli.doctor import torch_stop_note
    from rlprof_plugins.config.launch_config import ENV, from_environment

    monkeypatch.setenv(ENV, '{"python_stacks": "sampled", "torch_profiler_activities": ["CPU"]}')
    assert "off the engine thread" in torch_stop_note(from_environment())
    monkeypatch.setenv(ENV, '{"python_stacks": "exact"}')
    assert "on the engine thread (exact Python stacks" in torch_stop_note(from_environment())
    monkeypatch.setenv(ENV, '{"python_stacks": "off", "torch_profiler_activities": ["CPU"]}')
    monkeypatch.setenv(detached_stop.OFF_ENV, "1")
    assert torch_stop_note(from_environment()) == f"torch's stop: on the engine thread ({detached_stop.OFF_ENV}=1)"


def test_with_no_thread_to_be_had_the_stop_post_processes_in_place_and_the_next_start_does_not_wait(
        tmp_path, monkeypatch):
    class NoThreads(threading.Thread):
        def start(self):
            raise RuntimeError("can't start new thread")

    backend = TorchProfilerBackend(TorchSettings(use_gzip=False))
    backend.start()
    operators(300)
    monkeypatch.setattr(detached_stop.threading, "Thread", NoThreads)
    backend.stop()
    assert backend.stop_seconds() is not None and not detached_stop._IN_FLIGHT  # done before stop() returned
    monkeypatch.undo()
    following = TorchProfilerBackend(TorchSettings(use_gzip=False))
    following.start()  # nothing in flight to wait for
    following.stop()
    assert op_counts(recorded(backend, tmp_path, "in_place"))["aten::transpose"] == 300
    recorded(following, tmp_path, "following")
