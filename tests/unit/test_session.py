"""The worker-side controller, driven like an engine drives it, with the real
torch.profiler backend; assertions read the exported trace files."""

from pathlib import Path

import torch

from rlprof_plugins.backends.torch_profiler import TorchProfilerBackend, TorchSettings
from rlprof_plugins.session import ProfilerController
from tests.helpers.traces import iteration_indices, load_trace


def make_controller(root: Path, backend_factory=None) -> ProfilerController:
    settings = TorchSettings(activities=("CPU",), write_table=False)
    return ProfilerController(
        root_dir=str(root),
        worker_name=lambda prefix: f"{prefix}_rank0" if prefix else "rank0",
        backend_factory=backend_factory or (lambda: TorchProfilerBackend(settings)),
    )


def run_iterations(ctl: ProfilerController, n: int) -> None:
    x = torch.randn(16, 16)
    for _ in range(n):
        if ctl.active:
            ctl.begin_iteration()
            (x @ x).sum()
            ctl.end_iteration()
        else:
            (x @ x).sum()


def start(ctl, **kw):
    cmd = {"op": "start", "global_step": None, "step_start": 0, "step_end": None, "profile_prefix": None}
    cmd.update(kw)
    return ctl.handle(cmd)


def only_trace(directory: Path) -> Path:
    traces = list(directory.glob("*.pt.trace.json.gz"))
    assert len(traces) == 1, traces
    return traces[0]


def test_window_auto_exports_exactly_the_window(tmp_path):
    ctl = make_controller(tmp_path)
    assert start(ctl, global_step=37, step_start=2, step_end=6)["ok"]
    run_iterations(ctl, 10)
    status = ctl.handle({"op": "status"})["session"]
    assert status["state"] == "done" and status["ended_by"] == "window"
    assert status["iterations_recorded"] == 4
    trace = load_trace(only_trace(tmp_path / "global_step_37"))
    assert iteration_indices(trace) == [2, 3, 4, 5]


def test_stop_after_window_says_already_finished_then_conflicts(tmp_path):
    ctl = make_controller(tmp_path)
    start(ctl, step_start=0, step_end=2)
    run_iterations(ctl, 3)
    first = ctl.handle({"op": "stop"})
    assert first["ok"] and first["already_finished"]
    second = ctl.handle({"op": "stop"})
    assert not second["ok"] and "no profiling session" in second["conflict"]


def test_double_start_conflicts_and_keeps_the_first(tmp_path):
    ctl = make_controller(tmp_path)
    assert start(ctl, global_step=1)["ok"]
    reply = start(ctl, global_step=2)
    assert not reply["ok"] and "already running" in reply["conflict"]
    run_iterations(ctl, 2)
    assert ctl.handle({"op": "stop"})["ok"]
    assert iteration_indices(load_trace(only_trace(tmp_path / "global_step_1"))) == [0, 1]
    assert not (tmp_path / "global_step_2").exists()


def test_consecutive_sessions_each_get_a_complete_trace(tmp_path):
    ctl = make_controller(tmp_path)
    for step in range(3):
        start(ctl, global_step=step, step_start=1, step_end=3, profile_prefix="p")
        run_iterations(ctl, 4)
    for step in range(3):
        trace_path = only_trace(tmp_path / f"global_step_{step}")
        assert trace_path.name.startswith("p_rank0.")
        assert iteration_indices(load_trace(trace_path)) == [1, 2]


def test_stop_before_window_writes_nothing(tmp_path):
    ctl = make_controller(tmp_path)
    start(ctl, global_step=4, step_start=5, step_end=8)
    run_iterations(ctl, 2)
    reply = ctl.handle({"op": "stop"})
    assert reply["ok"] and reply["session"]["iterations_recorded"] == 0
    assert not (tmp_path / "global_step_4").exists()


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
    s = ctl.handle({"op": "status"})["session"]
    assert s["state"] == "failed" and "FileExistsError" in s["error"]
    assert not ctl.active


def test_failing_export_leaves_no_file_under_a_final_name(tmp_path):
    broken = [True]  # only the first session's export breaks

    class BrokenExport(TorchProfilerBackend):
        def export(self, directory, worker_name):
            if broken.pop() if broken else False:  # write a temp, then fail mid-way
                self._prof.export_chrome_trace = lambda path: (Path(path).write_text("{partial"), 1 / 0)
            return super().export(directory, worker_name)

    ctl = make_controller(tmp_path, lambda: BrokenExport(TorchSettings(write_table=False)))
    start(ctl, global_step=9, step_end=1)
    run_iterations(ctl, 1)  # must not raise into the "engine"
    s = ctl.handle({"op": "status"})["session"]
    assert s["state"] == "failed" and "ZeroDivisionError" in s["error"]
    assert list((tmp_path / "global_step_9").iterdir()) == []
    # the controller keeps working for the next session
    assert start(ctl, global_step=10, step_end=1)["ok"]
    run_iterations(ctl, 1)
    assert ctl.handle({"op": "status"})["session"]["state"] == "done"


def test_backend_that_cannot_start_fails_the_session(tmp_path):
    class NoStart:
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
    ctl.shutdown()
    s = ctl.handle({"op": "status"})["session"]
    assert s["state"] == "done" and s["ended_by"] == "shutdown"
    assert iteration_indices(load_trace(only_trace(tmp_path / "global_step_3"))) == [0, 1]
    ctl.shutdown()  # nothing running: a no-op
