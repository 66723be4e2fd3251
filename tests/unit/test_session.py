"""The worker-side controller, driven like an engine drives it, with the real
torch.profiler backend; assertions read the exported trace files."""

import collections
import json
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from rlprof_plugins.backends.torch_profiler import TorchProfilerBackend, TorchSettings
from rlprof_plugins.session.controller import ProfilerController
from rlprof_plugins.stages import IterationInfo
from tests.helpers.traces import iteration_indices, iteration_stages, load_trace, rank_folder

PREFILL = IterationInfo(prefill_tokens=12, decode_tokens=0, batch_size=1)
DECODE = IterationInfo(prefill_tokens=0, decode_tokens=4, batch_size=4)


def make_controller(root: Path, backend_factory=None, **kw) -> ProfilerController:
    return ProfilerController(
        root_dir=str(root),
        worker_name=lambda prefix: f"{prefix}_rank0" if prefix else "rank0",
        backend_factory=backend_factory or (lambda table, _overrides=None: TorchProfilerBackend(TorchSettings(write_table=table))),
        manifest_header={"engine": "test", "expected_ranks": 1},
        **kw,
    )


def run_iterations(ctl: ProfilerController, n: int, infos=None) -> None:
    x = torch.randn(16, 16)
    for k in range(n):
        if ctl.active:
            ctl.begin_iteration(infos[k % len(infos)] if infos else None)
            (x @ x).sum()
            ctl.end_iteration()
        else:
            (x @ x).sum()


def start(ctl, **kw):
    cmd = {"op": "start", "global_step": None, "step_start": 0, "step_end": None, "profile_prefix": None}
    cmd.update(kw)
    return ctl.handle(cmd)


def settle(ctl, global_step=None, timeout=300.0) -> dict:
    """Wait until the session's export (a background thread) has finished (``timeout``: a bound on a broken one)."""
    deadline = time.time() + timeout
    while True:
        s = ctl.handle({"op": "status", "global_step": global_step})["session"]
        if s["state"] not in ("waiting", "recording", "exporting") or time.time() > deadline:
            return s
        time.sleep(0.02)


def only_trace(directory: Path) -> Path:
    traces = list(rank_folder(directory).glob("*.pt.trace.json.gz"))
    assert len(traces) == 1, traces
    return traces[0]


def test_window_auto_exports_exactly_the_window(tmp_path):
    ctl = make_controller(tmp_path)
    assert start(ctl, global_step=37, step_start=2, step_end=6)["ok"]
    run_iterations(ctl, 10)
    status = settle(ctl)
    assert status["state"] == "done" and status["ended_by"] == "window"
    assert status["iterations_recorded"] == 4
    trace = load_trace(only_trace(tmp_path / "global_step_37"))
    assert iteration_indices(trace) == [2, 3, 4, 5]


def test_stop_returns_while_the_export_runs_elsewhere(tmp_path):
    """The export is held until the test lets it go, so a stop that answered did not wait for it: it answers
    ``exporting`` with nothing written. No clock in the assertions: a stop that waited would be answered only
    once the watchdog let the export go (after 60 s), and then ``done``."""
    release = threading.Event()

    class HeldExport(TorchProfilerBackend):
        def export(self, directory, worker_name, **kw):
            release.wait()
            return super().export(directory, worker_name, **kw)

    ctl = make_controller(tmp_path, lambda table, _overrides: HeldExport(TorchSettings()))
    start(ctl, global_step=1)
    run_iterations(ctl, 3)
    watchdog = threading.Timer(60, release.set)
    watchdog.start()
    reply = ctl.handle({"op": "stop"})  # on the thread that recorded, as the engine's hooks call it
    try:
        assert not release.is_set(), "the stop waited for the export"
        assert reply["ok"] and reply["session"]["state"] == "exporting"
        assert not list((tmp_path / "global_step_1").glob("*.pt.trace.json.gz"))
        # the engine keeps iterating and may start the next step meanwhile
        assert start(ctl, global_step=2, step_end=1)["ok"]
        run_iterations(ctl, 1)
    finally:
        release.set()
        watchdog.cancel()
    assert settle(ctl, global_step=1)["state"] == "done"
    assert settle(ctl, global_step=2)["state"] == "done"
    assert iteration_indices(load_trace(only_trace(tmp_path / "global_step_1"))) == [0, 1, 2]


def test_stop_after_window_says_already_finished_then_conflicts(tmp_path):
    ctl = make_controller(tmp_path)
    start(ctl, step_start=0, step_end=2)
    run_iterations(ctl, 3)
    first = ctl.handle({"op": "stop"})
    assert first["ok"] and first["already_finished"]
    second = ctl.handle({"op": "stop"})
    assert not second["ok"] and "no profiling session" in second["conflict"]
    settle(ctl)


def test_double_start_conflicts_and_keeps_the_first(tmp_path):
    ctl = make_controller(tmp_path)
    assert start(ctl, global_step=1)["ok"]
    reply = start(ctl, global_step=2)
    assert not reply["ok"] and "already running" in reply["conflict"]
    run_iterations(ctl, 2)
    assert ctl.handle({"op": "stop"})["ok"]
    settle(ctl)
    assert iteration_indices(load_trace(only_trace(tmp_path / "global_step_1"))) == [0, 1]
    assert not (tmp_path / "global_step_2").exists()


def test_consecutive_sessions_each_get_a_complete_trace(tmp_path):
    ctl = make_controller(tmp_path)
    for step in range(3):
        start(ctl, global_step=step, step_start=1, step_end=3, profile_prefix="p")
        run_iterations(ctl, 4)
    for step in range(3):
        assert settle(ctl, global_step=step)["state"] == "done"
        trace_path = only_trace(tmp_path / f"global_step_{step}")
        assert trace_path.name.startswith("p_rank0.")
        assert iteration_indices(load_trace(trace_path)) == [1, 2]


def test_stop_before_window_writes_no_trace(tmp_path):
    ctl = make_controller(tmp_path)
    start(ctl, global_step=4, step_start=5, step_end=8)
    run_iterations(ctl, 2)
    reply = ctl.handle({"op": "stop"})
    assert reply["ok"] and reply["session"]["iterations_recorded"] == 0
    assert sorted(p.name for p in (tmp_path / "global_step_4").iterdir()) == [".manifest.lock", "manifest.json"]
    assert json.loads((tmp_path / "global_step_4" / "manifest.json").read_text())["state"] == "done"


def test_bad_global_step_is_invalid_and_writes_nothing(tmp_path):
    ctl = make_controller(tmp_path)
    reply = start(ctl, global_step=-2)
    assert reply["invalid"]["field"] == "global_step"
    assert list(tmp_path.iterdir()) == []
    assert not ctl.active


def test_uncreatable_step_folder_fails_the_session_not_the_caller(tmp_path):
    (tmp_path / "global_step_1").write_text("a file where the folder should go")
    ctl = make_controller(tmp_path)
    start(ctl, global_step=1, step_end=1)
    run_iterations(ctl, 2)  # must not raise into the "engine"
    s = settle(ctl)
    assert s["state"] == "failed" and "FileExistsError" in s["error"]
    assert not ctl.active


def test_failing_export_leaves_no_file_under_a_final_name(tmp_path):
    broken = [True]  # only the first session's export breaks

    class BrokenExport(TorchProfilerBackend):
        def _raw_trace(self, beside):
            raw = super()._raw_trace(beside)
            if broken.pop() if broken else False:  # the trace saved to its temporary name, then a failure
                raw.write_text("{partial")
                1 / 0
            return raw

    ctl = make_controller(tmp_path, lambda table, _overrides: BrokenExport(TorchSettings()))
    start(ctl, global_step=9, step_end=1)
    run_iterations(ctl, 1)  # must not raise into the "engine"
    s = settle(ctl)
    assert s["state"] == "failed" and "ZeroDivisionError" in s["error"]
    folder = tmp_path / "global_step_9"
    assert not list(folder.glob("*.json*")) or [p.name for p in folder.glob("*.json*")] == ["manifest.json"]
    assert not list(folder.glob("*.tmp"))
    data = json.loads((folder / "manifest.json").read_text())
    assert data["state"] == "failed" and "ZeroDivisionError" in data["writers"]["rank0"]["error"]
    # the controller keeps working for the next session
    assert start(ctl, global_step=10, step_end=1)["ok"]
    run_iterations(ctl, 1)
    assert settle(ctl)["state"] == "done"


def test_backend_that_cannot_start_fails_the_session(tmp_path):
    class NoStart:
        def __init__(self, table, overrides=None):
            pass

        def prepare(self, directory, worker_name, scratch=None):
            pass

        def start(self):
            raise RuntimeError("profiler busy")

    ctl = make_controller(tmp_path, NoStart)
    reply = start(ctl, global_step=1)
    assert reply["session"]["state"] == "failed"
    assert "profiler busy" in reply["session"]["error"]
    assert not ctl.active


def test_shutdown_writes_a_running_session(tmp_path):
    ctl = make_controller(tmp_path)
    start(ctl, global_step=3)
    run_iterations(ctl, 2)
    ctl.shutdown()  # waits for the export
    s = ctl.handle({"op": "status"})["session"]
    assert s["state"] == "done" and s["ended_by"] == "shutdown"
    assert iteration_indices(load_trace(only_trace(tmp_path / "global_step_3"))) == [0, 1]
    ctl.shutdown()  # nothing running: a no-op


def test_by_stage_writes_one_trace_per_stage(tmp_path):
    ctl = make_controller(tmp_path)
    start(ctl, global_step=5, step_start=1, step_end=7, by_stage=True)
    run_iterations(ctl, 8, infos=[PREFILL, DECODE, DECODE])
    s = settle(ctl)
    assert s["state"] == "done" and s["stage_iterations"] == {"decode": 4, "prefill": 2}
    folder = tmp_path / "global_step_5"
    prefill = load_trace(next(rank_folder(folder, "prefill").glob("rank0.*.prefill.pt.trace.json.gz")))
    decode = load_trace(next(rank_folder(folder, "decode").glob("rank0.*.decode.pt.trace.json.gz")))
    assert not list(folder.rglob("rank0.*[0-9].pt.trace.json.gz"))  # no whole-window trace
    # iterations 1..6 of the cycle P D D P D D P D: prefill at 3, 6; decode at 1, 2, 4, 5
    assert iteration_stages(prefill) == {3: "prefill", 6: "prefill"}
    assert iteration_stages(decode) == {1: "decode", 2: "decode", 4: "decode", 5: "decode"}
    files = json.loads((folder / "manifest.json").read_text())["files"]
    assert sorted(f["stage"] for f in files) == ["decode", "prefill"]


def test_operator_table_is_opt_in(tmp_path):
    ctl = make_controller(tmp_path)
    start(ctl, global_step=1, step_end=1)
    run_iterations(ctl, 1)
    settle(ctl)
    assert not list((tmp_path / "global_step_1").glob("*.profiler_out.txt"))
    start(ctl, global_step=2, step_end=1, operator_table=True)
    run_iterations(ctl, 1)
    status = settle(ctl)
    (table,) = rank_folder(tmp_path / "global_step_2").glob("rank0.profiler_out.txt")
    assert "aten::mm" in table.read_text()
    # the status and the rank's section of the manifest say how the recording's chunks ended (``chunk_plan``): the
    # operator table's session is one torch session
    manifest = json.loads((tmp_path / "global_step_2" / "manifest.json").read_text())
    assert status["chunking"] == "none" and manifest["writers"]["rank0"]["chunking"] == "none"


def test_manifest_describes_the_step(tmp_path):
    ctl = make_controller(tmp_path)
    start(ctl, global_step=8, step_start=1, step_end=3, session_id="abc")
    run_iterations(ctl, 3, infos=[PREFILL, DECODE])
    settle(ctl)
    m = json.loads((tmp_path / "global_step_8" / "manifest.json").read_text())
    assert (m["session_id"], m["global_step"], m["state"], m["engine"]) == ("abc", 8, "done", "test")
    assert m["window"] == {"step_start": 1, "step_end": 3}
    rank = m["writers"]["rank0"]
    assert rank["iterations_recorded"] == 2 and rank["stage_iterations"] == {"decode": 1, "prefill": 1}
    (f,) = m["files"]
    assert f["rank"] == "rank0" and f["stage"] == "all" and f["kind"] == "trace"
    assert f["bytes"] == (tmp_path / "global_step_8" / f["path"]).stat().st_size


def test_keep_last_steps_prunes_only_complete_older_steps(tmp_path):
    ctl = make_controller(tmp_path)
    (tmp_path / "global_step_0").mkdir()  # an incomplete folder (no manifest): kept
    for step in (1, 2, 3, 4):
        start(ctl, global_step=step, step_end=1, keep_last_steps=2)
        run_iterations(ctl, 1)
        settle(ctl)
    # retention runs on the finalize thread after the step's last manifest write
    for t in threading.enumerate():
        if t.name == "rlprof-finalize":
            t.join(30)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["global_step_0", "global_step_3", "global_step_4"]


class ThreadRecordingBackend(TorchProfilerBackend):
    """Remembers which thread started and which stopped the profiler."""

    def __init__(self, settings):
        super().__init__(settings)
        self.threads = {}

    def start(self):
        import threading

        self.threads["start"] = threading.get_ident()
        super().start()

    def stop(self):
        import threading

        self.threads["stop"] = threading.get_ident()
        super().stop()


def test_deferred_stop_answers_first_and_stops_at_the_next_iteration(tmp_path):
    backends = []

    def factory(table, overrides):
        backends.append(ThreadRecordingBackend(TorchSettings()))
        return backends[-1]

    ctl = make_controller(tmp_path, factory)
    start(ctl, global_step=5)
    run_iterations(ctl, 3)
    reply = ctl.handle({"op": "stop", "defer": True})
    assert reply["ok"] and reply["stop_pending"]
    assert reply["session"]["state"] == "exporting" and reply["session"]["stop_seconds"] is None
    assert "stop" not in backends[0].threads  # the profiler still runs: the answer came first
    assert ctl.active  # the hooks must call back to finish the stop
    run_iterations(ctl, 2)  # the first of these completes the stop; none is recorded
    status = settle(ctl, global_step=5)
    assert status["state"] == "done" and status["stop_seconds"] is not None
    assert backends[0].threads["stop"] == backends[0].threads["start"]
    assert not ctl.active
    assert iteration_indices(load_trace(only_trace(tmp_path / "global_step_5"))) == [0, 1, 2]


def test_deferred_stop_completes_on_request_or_before_the_next_start(tmp_path):
    ctl = make_controller(tmp_path)
    start(ctl, global_step=1)
    run_iterations(ctl, 2)
    assert ctl.handle({"op": "stop", "defer": True})["stop_pending"]
    assert ctl.handle({"op": "complete_stop"})["ok"]  # what the idle engine sends
    assert settle(ctl, global_step=1)["state"] == "done"
    assert ctl.handle({"op": "complete_stop"})["ok"]  # nothing pending: a no-op

    start(ctl, global_step=2)
    run_iterations(ctl, 1)
    assert ctl.handle({"op": "stop", "defer": True})["stop_pending"]
    assert start(ctl, global_step=3, step_end=2)["ok"]  # stops step 2's profiler first
    run_iterations(ctl, 3)
    assert [settle(ctl, global_step=g)["state"] for g in (2, 3)] == ["done", "done"]
    assert iteration_indices(load_trace(only_trace(tmp_path / "global_step_2"))) == [0]
    assert iteration_indices(load_trace(only_trace(tmp_path / "global_step_3"))) == [0, 1]


def test_deferred_stop_is_completed_at_shutdown(tmp_path):
    ctl = make_controller(tmp_path)
    start(ctl, global_step=9)
    run_iterations(ctl, 2)
    assert ctl.handle({"op": "stop", "defer": True})["stop_pending"]
    ctl.shutdown()
    assert ctl.handle({"op": "status", "global_step": 9})["session"]["state"] == "done"
    assert iteration_indices(load_trace(only_trace(tmp_path / "global_step_9"))) == [0, 1]


def test_window_from_zero_can_wait_for_the_first_iteration(tmp_path):
    """SGLang's controller (record_from_request=False): nothing records until an iteration begins,
    so an idle busy-polling scheduler is not recorded; then iteration 0 is the first recorded."""
    ctl = make_controller(tmp_path, record_from_request=False)
    assert start(ctl, global_step=1, step_end=3)["session"]["state"] == "waiting"
    torch.randn(64, 64).sum()  # work between the request and the first iteration: not recorded
    assert ctl.handle({"op": "status", "global_step": 1})["session"]["state"] == "waiting"
    run_iterations(ctl, 5)
    assert settle(ctl, 1)["state"] == "done"
    assert iteration_indices(load_trace(only_trace(tmp_path / "global_step_1"))) == [0, 1, 2]

    start(ctl, global_step=2)  # no traffic, then a stop: no trace, nothing recorded
    stopped = ctl.handle({"op": "stop"})
    assert stopped["ok"] and stopped["session"]["iterations_recorded"] == 0
    assert not list((tmp_path / "global_step_2").glob("*.pt.trace.json.gz"))


def test_by_stage_step_folders_hold_stage_folders_only(tmp_path):
    """A by-stage step folder has prefill/ and decode/ (what per-rank tools
    open), no empty ranks/ and no leftover whole trace."""
    ctl = make_controller(tmp_path)
    assert start(ctl, global_step=3, step_start=0, step_end=2, by_stage=True)["ok"]
    run_iterations(ctl, 3, [PREFILL, DECODE])
    assert settle(ctl, 3)["state"] == "done"
    folder = tmp_path / "global_step_3"
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == ["decode", "manifest.json",
                                                                                     "prefill"]
    assert not list(folder.glob(".*.tmp"))


def test_torchs_stop_makes_no_event_objects_where_nothing_reads_them(tmp_path, monkeypatch):
    """Where torch has it (2.13+), a session without exact stacks or the operator table records with
    torch's ``trace_only``: its stop, paid on the engine thread, makes no event objects beside the trace.
    The trace holds the same events as without it; exact stacks and the operator table (which read those
    objects) record as before."""
    from rlprof_plugins.backends import torch_profiler

    if torch_profiler.trace_only_config(torch) is None:
        pytest.skip(f"torch {torch.__version__} has no trace_only")
    made: list[TorchProfilerBackend] = []

    def factory(settings):
        def build(table, _overrides=None):
            made.append(TorchProfilerBackend(replace(settings, write_table=table)))
            return made[-1]
        return build

    def events(step: int) -> collections.Counter:
        trace = load_trace(only_trace(tmp_path / f"global_step_{step}"))
        return collections.Counter((e.get("cat"), e["name"].split(" [")[0]) for e in trace["traceEvents"]
                                   if e.get("cat") in ("cpu_op", "user_annotation"))

    for step, settings, table, trace_only in ((1, TorchSettings(), False, True),
                                              (2, TorchSettings(with_stack=True), False, False),
                                              (3, TorchSettings(), True, False)):
        ctl = make_controller(tmp_path, factory(settings))
        start(ctl, global_step=step, step_end=3, operator_table=table)
        run_iterations(ctl, 3)
        assert settle(ctl, step)["state"] == "done"
        assert made[-1]._prof.profiler.experimental_config.trace_only is trace_only, step
    assert events(1)[("cpu_op", "aten::mm")] == 3
    assert events(1) == events(3)  # the same events, with and without trace_only
    assert any(e.get("cat") == "python_function" for e in load_trace(only_trace(tmp_path / "global_step_2"))["traceEvents"])
    monkeypatch.setattr(torch_profiler, "_TRACE_ONLY", [None])  # an older torch: recorded as before
    ctl = make_controller(tmp_path, factory(TorchSettings()))
    start(ctl, global_step=4, step_end=3)
    run_iterations(ctl, 3)
    assert settle(ctl, 4)["state"] == "done"
    assert made[-1]._prof.profiler.experimental_config.trace_only is False
    assert events(4) == events(1)


def test_a_window_that_begins_later_warms_its_backend_up_at_the_start_request(tmp_path):
    """torch's first profiler start in a process imports torch's compiler (seconds): a session whose recording
    begins with a later iteration has its backend load that with the start request, not inside the recorded
    work; a session recording from the request starts its backend there and then, and a backend without
    ``warm_up`` (or one whose warm-up fails) still records."""
    warmed: list[str] = []

    class Warming(TorchProfilerBackend):
        def warm_up(self):
            warmed.append("warm")
            super().warm_up()

    class Failing(TorchProfilerBackend):
        def warm_up(self):
            raise RuntimeError("no compiler here")

    ctl = make_controller(tmp_path, lambda table, _overrides=None: Warming(TorchSettings()))
    assert start(ctl, global_step=1, step_start=2, step_end=4)["ok"]
    assert warmed == ["warm"]  # before any iteration
    run_iterations(ctl, 4)
    assert settle(ctl, 1)["state"] == "done" and warmed == ["warm"]
    assert start(ctl, global_step=2, step_end=2)["ok"]  # recording from the request: its start is the warm-up
    run_iterations(ctl, 2)
    assert settle(ctl, 2)["state"] == "done" and warmed == ["warm"]
    failing = make_controller(tmp_path, lambda table, _overrides=None: Failing(TorchSettings()))
    assert start(failing, global_step=3, step_start=1, step_end=2)["ok"]
    run_iterations(failing, 3)
    assert settle(failing, 3)["state"] == "done"


def test_warm_up_runs_one_throwaway_profiler_session_per_process(tmp_path, monkeypatch):
    """The first profiler session in a process sets Kineto up for its activities: ``warm_up`` runs one empty
    session with the backend's activities, once per process, saving nothing; the recording after it holds
    its own events only."""
    from rlprof_plugins.backends import torch_profiler

    monkeypatch.setattr(torch_profiler, "_WARMED", [])
    sessions: list[list] = []
    real = torch.profiler.profile

    def counting(*args, **kwargs):
        sessions.append(list(kwargs.get("activities") or []))
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.profiler, "profile", counting)
    backend = TorchProfilerBackend(TorchSettings())
    backend.warm_up()
    backend.warm_up()
    TorchProfilerBackend(TorchSettings()).warm_up()
    assert sessions == [[torch.profiler.ProfilerActivity.CPU]]
    assert not torch.autograd.profiler._is_profiler_enabled
    assert list(tmp_path.iterdir()) == []
    ctl = make_controller(tmp_path, lambda table, _overrides=None: TorchProfilerBackend(TorchSettings()))
    start(ctl, global_step=1, step_start=2, step_end=4)
    run_iterations(ctl, 4)
    assert settle(ctl, 1)["state"] == "done"
    ops = [e for e in load_trace(only_trace(tmp_path / "global_step_1"))["traceEvents"] if e.get("name") == "aten::mm"]
    assert len(ops) == 2  # iterations 2 and 3, nothing from the warm-up
