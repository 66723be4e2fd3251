"""Memory snapshots over a session's window (``memory``, SGLang's ``activities: ["MEM"]``).

The real session controller and torch.profiler backend record; the device
allocator is ``tests/stand_ins/cuda_memory`` (no GPU here), whose signatures
are checked here against torch's installed source and torch_npu 2.14.0's.
Assertions read the written pickle, the manifest and the trace.
"""

from __future__ import annotations

import ast
import inspect
import json
import pickle
import zipfile
from pathlib import Path

import pytest
import torch

from rlprof_plugins.backends import memory_history
from rlprof_plugins.config.options import ProfileOptions, parse_options
from rlprof_plugins.config.requests import Server, parse_start
from rlprof_plugins.errors import OptionsError, RequestError
from rlprof_plugins.trace.format.pauses import MEMORY, PAUSE_NAME
from tests.helpers.traces import iteration_indices, load_trace, rank_folder
from tests.stand_ins.cuda_memory import AllocatorStandIn
from tests.unit.test_session import make_controller, settle, start

MB = 1 << 20


def run_allocating(ctl, allocator: AllocatorStandIn, n: int, keep: list) -> None:
    """n engine iterations; iteration k allocates (k+1) MB and keeps it, and a scratch block it frees."""
    x = torch.randn(16, 16)
    for k in range(n):
        live = ctl.active
        if live:
            ctl.begin_iteration(None)
        keep.append(allocator.malloc((k + 1) * MB))
        scratch = allocator.malloc(4096)
        (x @ x).sum()
        allocator.free(scratch)
        if live:
            ctl.end_iteration()


def memory_controller(tmp_path: Path, allocator: AllocatorStandIn, **kw):
    return make_controller(tmp_path, allocator=lambda: allocator, **kw)


def test_the_window_s_history_is_written_per_rank_with_protocol_4(tmp_path):
    allocator, keep = AllocatorStandIn(), []
    ctl = memory_controller(tmp_path, allocator)
    assert start(ctl, global_step=3, step_start=1, step_end=4, memory=True, memory_stacks="python",
                 memory_max_entries=1000)["ok"]
    run_allocating(ctl, allocator, 6, keep)
    status = settle(ctl)
    assert status["state"] == "done", status["error"]
    step = tmp_path / "global_step_3"
    pickle_path = step / "memory" / "rank0.pickle"
    raw = pickle_path.read_bytes()
    assert raw[:2] == b"\x80\x04"  # protocol 4: PyTorch's memory viewer reads it
    snapshot = pickle.loads(raw)
    allocs = [e for e in snapshot["device_traces"][0] if e["action"] == "alloc"]
    # iterations 1, 2, 3 of the window: 2, 3 and 4 MB kept plus a scratch block each
    assert sorted(e["size"] for e in allocs if e["size"] >= MB) == [2 * MB, 3 * MB, 4 * MB]
    assert len(allocs) == 6
    assert all(any(f["name"] == "run_allocating" for f in e["frames"]) for e in allocs)
    # history started with the window's first iteration and stopped at its end, with python stacks
    recorded = [c for name, c in allocator.calls if name == "_record_memory_history"]
    assert recorded[0] == {"enabled": "all", "context": "all", "stacks": "python", "max_entries": 1000}
    assert recorded[-1]["enabled"] is None and not allocator.recording
    # the manifest lists it, the status says what it cost
    manifest = json.loads((step / "manifest.json").read_text())
    listed = [f for f in manifest["files"] if f["kind"] == "memory"]
    assert listed == [{"path": "memory/rank0.pickle", "rank": "rank0", "role": "worker", "kind": "memory",
                       "stage": "all", "bytes": len(raw)}]
    memory = status["memory"]
    assert memory["entries"] == len(snapshot["device_traces"][0]) and memory["bytes"] == len(raw)
    assert memory["snapshot_seconds"] >= 0 and memory["dump_seconds"] >= 0 and memory["stacks"] == "python"
    # the trace: the window's iterations, and the snapshot's pause on the engine thread marked
    trace = load_trace(next(rank_folder(step).glob("*.pt.trace.json.gz")))
    assert iteration_indices(trace) == [1, 2, 3]
    pauses = [e for e in trace["traceEvents"] if e.get("name") == PAUSE_NAME]
    assert [p["args"]["cause"] for p in pauses] == [MEMORY, "stop"]
    assert pauses[0]["args"]["first_iteration"] == 1 and pauses[0]["args"]["last_iteration"] == 3


def test_mem_alone_records_the_history_and_no_trace(tmp_path):
    allocator, keep = AllocatorStandIn(), []
    ctl = memory_controller(tmp_path, allocator)
    request = parse_start({"global_step": 5, "activities": ["MEM"], "num_steps": 2},
                          Server(engine="sglang", defaults=ProfileOptions(), output_root=str(tmp_path), device="cuda"))
    assert request.memory and not request.trace
    assert ctl.handle(request.to_command())["ok"]
    run_allocating(ctl, allocator, 4, keep)
    status = settle(ctl)
    assert status["state"] == "done", status["error"]
    step = tmp_path / "global_step_5"
    assert not (step / "ranks").exists() and not list(step.glob("**/*.pt.trace.json*"))
    assert [f["kind"] for f in json.loads((step / "manifest.json").read_text())["files"]] == ["memory"]
    sizes = [e["size"] for e in pickle.loads((step / "memory" / "rank0.pickle").read_bytes())["device_traces"][0]
             if e["action"] == "alloc" and e["size"] >= MB]
    assert sizes == [1 * MB, 2 * MB]
    # the step report reads it: something to report, the step named for what it holds
    from rlprof_plugins.cli.command import main as rlprof

    out = tmp_path / "report.json"
    assert rlprof(["report", str(tmp_path), "--quiet", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["steps"][0]["memory"]["rank0"]["peak_allocated_mb"] == 3.004  # 1 + 2 MB kept, a 4 KB scratch
    assert data["notes"] == [f"step 5: no rank trace in {step} (memory snapshots only)"]


def test_without_a_global_step_the_snapshot_lies_beside_the_traces(tmp_path):
    allocator, keep = AllocatorStandIn(), []
    ctl = memory_controller(tmp_path, allocator)
    assert start(ctl, step_start=0, step_end=2, memory=True)["ok"]
    run_allocating(ctl, allocator, 3, keep)
    assert settle(ctl)["state"] == "done"
    assert len(list(tmp_path.glob("rank0.*.memory.pickle"))) == 1
    assert len(list(tmp_path.glob("rank0.*.pt.trace.json.gz"))) == 1


def test_a_failed_snapshot_fails_the_session_and_keeps_the_trace(tmp_path):
    class Broken(AllocatorStandIn):
        def _snapshot(self, device=None, augment_with_fx_traces=False):
            raise RuntimeError("allocator said no")

    allocator, keep = Broken(), []
    ctl = memory_controller(tmp_path, allocator)
    assert start(ctl, global_step=1, step_start=0, step_end=2, memory=True)["ok"]
    run_allocating(ctl, allocator, 3, keep)
    status = settle(ctl)
    assert status["state"] == "failed" and "memory snapshot failed: RuntimeError: allocator said no" in status["error"]
    assert not allocator.recording
    manifest = json.loads((tmp_path / "global_step_1" / "manifest.json").read_text())
    assert [f["kind"] for f in manifest["files"]] == ["trace"]  # the recorded trace stays, listed
    assert (tmp_path / "global_step_1" / manifest["files"][0]["path"]).exists()


@pytest.mark.parametrize("body, field", [({"memory": True}, "memory"), ({"activities": ["CPU", "MEM"]}, "activities"),
                                         ({"activities": ["MEM"], "memory": False}, "memory"),
                                         ({"memory": "yes"}, "memory")])
def test_a_host_without_a_device_allocator_refuses_memory_naming_the_field(tmp_path, body, field):
    server = Server(engine="vllm", defaults=ProfileOptions(), output_root=str(tmp_path), device="cpu")
    with pytest.raises(RequestError) as e:
        parse_start({"global_step": 1, **body}, server)
    assert e.value.field == field
    assert not list(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize("data, key", [({"memory": 1}, "memory"), ({"memory_stacks": "cpp"}, "memory_stacks"),
                                       ({"memory_max_entries": 0}, "memory_max_entries"),
                                       ({"memory_max_entries": True}, "memory_max_entries")])
def test_bad_memory_keys_name_the_key(data, key):
    with pytest.raises(OptionsError) as e:
        parse_options(data)
    assert e.value.key == key


def test_memory_configured_on_a_cpu_host_stops_the_start_up():
    options = parse_options({"memory": True, "memory_stacks": "all", "memory_max_entries": 5})
    assert (options.memory, options.memory_stacks, options.memory_max_entries) == (True, "all", 5)
    with pytest.raises(OptionsError) as e:
        memory_history.check_configured(options, "cpu")
    assert e.value.key == "memory" and "cpu" in e.value.message
    memory_history.check_configured(options, "cuda")  # torch.cuda.memory has the API, GPU or not


def _params(fn) -> list[tuple[str, str]]:
    return [(p.name, p.kind.name) for p in inspect.signature(fn).parameters.values()]


def test_the_stand_in_has_torch_s_signatures():
    real, stand_in = torch.cuda.memory, AllocatorStandIn()
    for name in ("_record_memory_history_impl", "_snapshot", "_dump_snapshot"):
        assert _params(getattr(stand_in, name)) == _params(getattr(real, name)), name
    # _record_memory_history's own def is (enabled="all", *args, **kwargs); torch shows the impl's signature on it
    code = real._record_memory_history.__code__
    assert code.co_varnames[:code.co_argcount] == ("enabled",) and code.co_flags & inspect.CO_VARARGS
    assert _params(stand_in._record_memory_history) == [("enabled", "POSITIONAL_OR_KEYWORD"),
                                                        ("args", "VAR_POSITIONAL"), ("kwargs", "VAR_KEYWORD")]


def test_torch_npu_has_the_arguments_the_history_passes():
    from tests.npu.sources import torch_npu_wheel

    with zipfile.ZipFile(torch_npu_wheel()) as wheel:
        tree = ast.parse(wheel.read("torch_npu/npu/memory.py").decode())
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    impl = [a.arg for a in defs["_record_memory_history_impl"].args.args]
    assert impl[:4] == ["enabled", "context", "stacks", "max_entries"]  # what MemoryHistory.start passes
    assert [a.arg for a in defs["_snapshot"].args.args] == ["device", "augment_with_fx_traces"]


def test_the_report_shows_each_rank_s_memory_over_the_window(tmp_path):
    """Before the window 1 MB stays allocated; iterations 1-3 keep 2, 3 and 4 MB: the peak is 10 MB and
    iteration 3's 4 KB scratch block, with those alive at it, made by run_allocating; the page shows
    the JSON's numbers."""
    from rlprof_plugins.cli.command import main as rlprof
    from tests.helpers.browser import cells_match_json, open_page

    allocator, keep = AllocatorStandIn(), []
    ctl = memory_controller(tmp_path / "root", allocator)
    assert start(ctl, global_step=3, step_start=1, step_end=4, memory=True)["ok"]
    run_allocating(ctl, allocator, 6, keep)
    assert settle(ctl)["state"] == "done"
    out = tmp_path / "report.json"
    assert rlprof(["report", str(tmp_path / "root"), "--quiet", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    memory = data["steps"][0]["memory"]["rank0"]
    assert memory["path"] == "memory/rank0.pickle"
    assert (memory["start_allocated_mb"], memory["peak_allocated_mb"], memory["end_allocated_mb"]) == (1.0, 10.004, 10.0)
    assert memory["peak_reserved_mb"] == memory["end_reserved_mb"] >= 10.0
    assert [a["mb"] for a in memory["top_at_peak"]] == [4.0, 3.0, 2.0, 0.004]
    assert all(a["frames"][0].startswith("run_allocating (test_memory_history.py:") for a in memory["top_at_peak"])
    allocated = [p[1] for p in memory["timeline"]]
    assert allocated[-1] == 10.0 and max(allocated) == 10.004 and min(allocated) >= 1.0
    page = open_page(tmp_path / "root" / "report.html", tmp_path / "shot.png")
    assert not page.console_errors and not page.blocked
    assert page.marks["memory"] == 2  # allocated and reserved lines of the one rank
    memory_cells = [c for c in page.cells if c["field"].startswith("memory.")]
    assert len(memory_cells) == 6 + 4
    assert cells_match_json(page, data) >= len(memory_cells)


def test_a_snapshot_that_asks_for_code_is_refused_not_run(tmp_path):
    from rlprof_plugins.report.render.build import build_here

    (tmp_path / "memory").mkdir()
    evil = pickle.dumps(print, protocol=4)  # any global: refused by name, never called
    (tmp_path / "memory" / "rank0.pickle").write_bytes(evil)
    built = build_here(tmp_path, use_cache=False)
    [row] = built.report["steps"]
    assert "builtins.print" in row["memory"]["rank0"]["error"]
    assert any("memory snapshot memory/rank0.pickle" in n and "builtins.print" in n for n in built.notes), built.notes


def third_chunk_cannot_start():
    """A backend factory whose third backend's profiler cannot start: a session's third chunk fails."""
    from rlprof_plugins.backends.torch_profiler import TorchProfilerBackend, TorchSettings

    made = []

    class NoStart(TorchProfilerBackend):
        def start(self):
            raise RuntimeError("Kineto could not start")

    def factory(table, overrides=None):
        made.append(1)
        return (NoStart if len(made) == 3 else TorchProfilerBackend)(TorchSettings())

    return factory


def test_a_failure_while_recording_keeps_the_memory_history_recorded_before_it(tmp_path):
    """The third chunk's profiler cannot start: the session fails, the two chunks before it stay, and so
    does the memory history of the iterations recorded until then (never dropped)."""
    factory = third_chunk_cannot_start()

    allocator, keep = AllocatorStandIn(), []
    ctl = memory_controller(tmp_path, allocator, backend_factory=factory)
    assert start(ctl, global_step=5, step_end=9, chunk_iterations=2, memory=True)["ok"]
    run_allocating(ctl, allocator, 9, keep)
    ctl.shutdown()  # waits for the exporter
    status = ctl.handle({"op": "status", "global_step": 5})["session"]
    assert status["state"] == "failed" and "Kineto could not start" in status["error"], status
    manifest = json.loads((tmp_path / "global_step_5" / "manifest.json").read_text())
    assert sorted(f["kind"] for f in manifest["files"]) == ["memory", "trace", "trace"]
    snapshot = pickle.loads((tmp_path / "global_step_5" / "memory" / "rank0.pickle").read_bytes())
    sizes = [e["size"] for e in snapshot["device_traces"][0] if e["action"] == "alloc" and e["size"] >= MB]
    assert sizes == [1 * MB, 2 * MB, 3 * MB, 4 * MB]  # iterations 0-3, then the failed rotation
    assert status["memory"]["entries"] == len(snapshot["device_traces"][0]) and not allocator.recording


def test_the_failures_manifest_never_lands_after_the_one_that_lists_the_kept_files(tmp_path, monkeypatch):
    """The failure's own manifest write, slowed (a preempted engine thread on a loaded host), cannot land after
    the exporter's, which lists the chunks and the memory history it kept: the manifest still lists them."""
    import threading
    import time

    from rlprof_plugins.session import controller as controller_module

    factory = third_chunk_cannot_start()

    real_report, engine_thread = controller_module.report, threading.get_ident()

    def slow_on_the_engine_thread(directory, *, section, **kw):
        if threading.get_ident() == engine_thread and section.get("state") == "failed" and not section.get("files"):
            built = dict(section)
            time.sleep(0.5)  # the exporter, free to run now, writes what it kept meanwhile
            return real_report(directory, section=built, **kw)
        return real_report(directory, section=section, **kw)

    monkeypatch.setattr(controller_module, "report", slow_on_the_engine_thread)
    allocator, keep = AllocatorStandIn(), []
    ctl = memory_controller(tmp_path, allocator, backend_factory=factory)
    assert start(ctl, global_step=5, step_end=9, chunk_iterations=2, memory=True)["ok"]
    run_allocating(ctl, allocator, 9, keep)
    ctl.shutdown()
    manifest = json.loads((tmp_path / "global_step_5" / "manifest.json").read_text())
    assert manifest["state"] == "failed"
    assert sorted(f["kind"] for f in manifest["files"]) == ["memory", "trace", "trace"]
