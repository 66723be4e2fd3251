"""The recorded half of the self-test: one session through rlprof's real path, then what landed.

The controller, backend choice, request parsing, chunks, stage split,
stitch, export and memory snapshot are the ones engine processes run; only
the engine is the self-test's own model. What the files hold is read back
the way users read them: ``rlprof check`` on each trace, the summary, the
step report, the memory snapshot as the report reads it, and the proof
checks (``proof.py``: kernels in every iteration, torch's memory
viewer, the merged trace, the report's device time).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from pathlib import Path
from typing import Any, Callable

from rlprof_plugins import __version__
from rlprof_plugins.backends import which_backend
from rlprof_plugins.backends.kind import BuildContext
from rlprof_plugins.backends.torch_profiler import TorchSettings
from rlprof_plugins.config.options import ProfileOptions
from rlprof_plugins.config.requests import Server, parse_start
from rlprof_plugins.session.controller import ProfilerController
from rlprof_plugins.store.manifest import TERMINAL, engine_header, read as read_manifest
from rlprof_plugins.trace.format.check import check
from rlprof_plugins.trace.format.pauses import PAUSE_NAME, ROTATION
from rlprof_plugins.trace.format.reader import TraceReader
from rlprof_plugins.stages import DECODE, PREFILL, IterationInfo, ITERATION_RE
from .proof import prove

CHUNKS = 4  # the window is recorded in about this many chunks, so the stitch runs
WAIT_SECONDS = 300


def record_session(test: Any, engine: Any, schedule: list[str], out: Path, *, memory: bool,
                   allocator: Callable[[], Any], plain: dict[str, list[float]], memory_why: str | None) -> None:
    device, shape = engine.device, engine.shape
    ctl, kind = _controller(device, out, allocator)
    test.costs["recorded with"] = f"{kind} backend" + (", memory history" if memory else "")
    request = parse_start({"global_step": 0, "by_stage": True, "chunk_iterations": max(2, len(schedule) // CHUNKS)},
                          Server(engine="selftest", defaults=ProfileOptions(), output_root=str(out), device=device))
    request = dataclasses.replace(request, memory=memory)  # the device's history was checked by the caller
    t0 = time.perf_counter()
    reply = ctl.handle(request.to_command())
    start_s = time.perf_counter() - t0
    test.add("session start", bool(reply.get("ok")), reply.get("error") or f"{start_s * 1e3:.1f} ms")
    if not reply.get("ok"):
        return
    recorded = engine.serve(schedule, around=_iterations(ctl, shape))
    t0 = time.perf_counter()
    ctl.handle({"op": "stop"})
    stop_s = time.perf_counter() - t0
    status = _settle(ctl)
    test.add("recording and export", status["state"] == "done" and status["iterations_recorded"] == len(schedule),
             status["error"] or f"{status['iterations_recorded']} iterations, {status['stops']} profiler stops")
    _costs(test, plain, recorded, start_s, stop_s, status)
    _read_back(test, status, schedule, memory, memory_why, chunked=kind == "torch")


def rollout_cost(test: Any, engine: Any, schedule: list[str], allocator: Callable[[], Any]) -> None:
    """A rollout served whole three ways, each timed from its first iteration to its last: unrecorded; recorded by
    torch's own profiler as the engines' native profilers run it (stacks off, stopped and written on the serving
    thread); and by rlprof's default, its session begun on a waiting engine, its chunk stopped when the engine
    waits after the rollout, then the stop request. Generation against unrecorded and what each costs the serving
    thread after the rollout go into the costs: the figure of this device for the recording path every device
    takes (docs/performance.md)."""
    import tempfile

    import torch

    def served(around: Callable[[str], Any] | None = None) -> float:
        t0 = time.perf_counter()
        engine.serve(schedule, around=around)
        return time.perf_counter() - t0

    plain = served()
    activities = [torch.profiler.ProfilerActivity.CPU] + (
        [torch.profiler.ProfilerActivity.CUDA] if engine.device == "cuda" else [])
    with tempfile.TemporaryDirectory(prefix="rlprof-selftest-rollout-") as scratch:
        native = torch.profiler.profile(activities=activities, with_stack=False)
        native.start()
        native_s = served()
        t0 = time.perf_counter()
        native.stop()
        native.export_chrome_trace(str(Path(scratch) / "native.pt.trace.json"))
        native_stop_s = time.perf_counter() - t0
        del native
        ctl, _ = _controller(engine.device, Path(scratch), allocator)
        request = parse_start({"global_step": 1}, Server(engine="selftest", defaults=ProfileOptions(),
                                                        output_root=scratch, device=engine.device))
        ctl.handle({**request.to_command(), "engine_idle": True})
        recorded_s = served(_iterations(ctl, engine.shape))
        t0 = time.perf_counter()
        ctl.idle()  # the engine waits for its next rollout: the running chunk stops here
        ctl.handle({"op": "stop"})
        stop_s = time.perf_counter() - t0
        status = _settle(ctl, 1)
        ctl.shutdown()
    test.add("a rollout recorded by rlprof's default", status["state"] == "done" and status["chunking"] == "idle",
             status["error"] or f"{status['iterations_recorded']} iterations, chunks end {status['chunking']}")
    test.costs["a rollout, recorded"] = (
        f"rlprof's default {recorded_s / plain:.2f}x of unrecorded, torch's own profiler (stacks off) "
        f"{native_s / plain:.2f}x; after the rollout, the serving thread {stop_s:.2f} s against {native_stop_s:.2f} s")


def _iterations(ctl: ProfilerController, shape: Any) -> Callable[[str], "_Iteration"]:
    """What ``engine.serve`` puts around each iteration: the controller told of it, as an engine's hook tells it."""
    infos = {PREFILL: IterationInfo(shape.batch * shape.prompt, 0, shape.batch),
             DECODE: IterationInfo(0, shape.batch, shape.batch)}
    return lambda stage: _Iteration(ctl, infos[stage])


class _Iteration:
    def __init__(self, ctl: ProfilerController, info: IterationInfo) -> None:
        self._ctl, self._info = ctl, info

    def __enter__(self) -> None:
        if self._ctl.active:
            self._ctl.begin_iteration(self._info)

    def __exit__(self, *exc: Any) -> None:
        self._ctl.end_iteration()


def _controller(device: str, out: Path, allocator: Callable[[], Any]) -> tuple[ProfilerController, str]:
    import torch

    options = ProfileOptions()
    kind = which_backend.resolve(options.backend, device)
    settings = TorchSettings(activities=("CPU", "CUDA") if device == "cuda" else ("CPU",))
    factory = which_backend.factory(kind, BuildContext(
        lambda table, overrides: dataclasses.replace(settings, write_table=table, **overrides), options))
    header = engine_header(engine="selftest", engine_version=f"torch {torch.__version__}", expected_ranks=1,
                           parallel={"tp": 1}, trace_dir=str(out), plugin_version=__version__)
    return ProfilerController(root_dir=str(out), worker_name=lambda prefix: "rank0", backend_factory=factory,
                              manifest_header=header, allocator=allocator), kind


def _settle(ctl: ProfilerController, step: int = 0) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        status = ctl.handle({"op": "status", "global_step": step})["session"]
        if status["state"] in TERMINAL or time.monotonic() > deadline:
            return status
        time.sleep(0.05)


def _median_ms(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1e3 if seconds else 0.0


def _costs(test: Any, plain: dict, recorded: dict, start_s: float, stop_s: float, status: dict) -> None:
    c = test.costs
    c["iteration, not profiled"] = ", ".join(f"{s} {_median_ms(plain[s]):.2f} ms" for s in (PREFILL, DECODE))
    c["iteration, recording"] = ", ".join(
        f"{s} {_median_ms(recorded[s]):.2f} ms ({_median_ms(recorded[s]) / max(_median_ms(plain[s]), 1e-9):.2f}x)"
        for s in (PREFILL, DECODE))
    c["start (engine thread; the process's first)"] = f"{start_s * 1e3:.1f} ms"
    c["stop request (engine thread)"] = f"{stop_s * 1e3:.1f} ms"
    c["export (exporter thread)"] = f"{(status['export_seconds'] or 0) * 1e3:.0f} ms"


def _read_back(test: Any, status: dict, schedule: list[str], memory: bool, memory_why: str | None,
               chunked: bool) -> None:
    """``chunked``: the torch backend (chunks, and a pause event per stop); torch_npu's stop does not
    post-process on the serving thread, so it records one session and marks no stop."""
    folder = Path(status["directory"])
    data = read_manifest(folder) or {}
    traces = [folder / f["path"] for f in data.get("files", []) if f.get("kind") == "trace"]
    counts = _count(traces)
    want = {s: schedule.count(s) for s in (PREFILL, DECODE)}
    got = {s: counts["iterations"].get(s, 0) for s in (PREFILL, DECODE)}
    stages = sorted({f.get("stage") for f in data.get("files", []) if f.get("kind") == "trace"})
    test.add("stage traces", got == want and stages == [DECODE, PREFILL],
             f"iterations prefill {got[PREFILL]}/{want[PREFILL]}, decode {got[DECODE]}/{want[DECODE]}")
    rotations = counts["causes"].count(ROTATION)
    test.add("chunks, stitched", (rotations >= 1 and rotations == status["stops"] - 1) if chunked else None,
             f"{status['stops']} chunks joined into one trace per stage" if chunked
             else "torch_npu records one session")
    expected = status["stops"] + (1 if memory else 0) if chunked else 0
    test.add("pauses marked in the trace", len(counts["pauses_ms"]) == expected,
             f"{len(counts['pauses_ms'])} `{PAUSE_NAME}` events, {expected} expected")
    reports = [check(t) for t in traces]
    test.add("rlprof check", bool(reports) and all(r.ok for r in reports),
             "; ".join(f"{r.path.name}: {r.events:,} events, {r.error_count} errors" for r in reports))
    pauses = counts["pauses_ms"]
    test.costs["pauses on the engine thread"] = (f"{len(pauses)} ({', '.join(counts['causes'])}): longest "
                                                f"{max(pauses, default=0):.1f} ms, total {sum(pauses):.1f} ms")
    size = sum(t.stat().st_size for t in traces)
    test.costs["trace size"] = f"{size / 1e6:.2f} MB gzip, {size / max(1, len(schedule)) / 1e3:.1f} KB per iteration"
    test.costs["device events"] = f"{counts['kernels']:,} kernels, {counts['flows']:,} flow events"
    cuda = test.device == "cuda"
    test.add("kernels and flow events", (counts["kernels"] > 0 and counts["flows"] > 0) if cuda else None,
             f"{counts['kernels']:,} kernels, {counts['flows']:,} flow events" if cuda
             else f"{test.device}: no CUDA kernels or CUPTI flows to count")
    _memory(test, folder, status, memory, memory_why)
    _summary_and_report(test, folder)
    prove(test, folder, traces)  # the GPU proof kit's checks (docs/gpu.md)


def _count(traces: list[Path]) -> dict[str, Any]:
    out: dict[str, Any] = {"iterations": {}, "pauses_ms": [], "causes": [], "kernels": 0, "flows": 0}
    for path in traces:
        with TraceReader(path) as reader:
            for e in reader.events():
                name, cat = e.get("name", ""), e.get("cat", "")
                if cat == "kernel":
                    out["kernels"] += 1
                elif e.get("ph") in ("s", "f"):
                    out["flows"] += 1
                elif name == PAUSE_NAME:
                    out["pauses_ms"].append(e.get("dur", 0) / 1e3)
                    out["causes"].append((e.get("args") or {}).get("cause", "?"))
                elif (m := ITERATION_RE.match(name)) and m["stage"]:
                    out["iterations"][m["stage"]] = out["iterations"].get(m["stage"], 0) + 1
    return out


def _memory(test: Any, folder: Path, status: dict, memory: bool, memory_why: str | None) -> None:
    from rlprof_plugins.report.execute.memory_pass import step_memory
    from rlprof_plugins.report.plan.planner import memory_files
    from rlprof_plugins.trace.analysis.memory_snapshot import snapshot_numbers

    if not memory:
        test.add("memory snapshot", None, memory_why or "not asked")
        return
    # each snapshot found and read as the report's plan and memory pass find and read it
    ranks = step_memory("", [(rank, str(p.relative_to(folder))) for rank, p in memory_files(folder)],
                        lambda rel: snapshot_numbers(folder / rel))
    m = ranks.get("rank0", {})
    report = status.get("memory") or {}
    ok = "error" not in m and m.get("entries", 0) > 0 and "error" not in report
    test.add("memory snapshot", ok, m.get("error") or report.get("error")
             or f"{m.get('entries', 0):,} history entries, peak {m.get('peak_allocated_mb', 0):.1f} MB allocated")
    if report:
        test.costs["memory snapshot"] = (f"{report.get('snapshot_seconds', 0) * 1e3:.1f} ms on the engine thread, "
                                         f"dump {report.get('dump_seconds', 0) * 1e3:.1f} ms, "
                                         f"{report.get('bytes', 0) / 1e6:.2f} MB ({report.get('stacks')} stacks)")


def _summary_and_report(test: Any, folder: Path) -> None:
    from rlprof_plugins.report.render.build import build_here, write_page
    from rlprof_plugins.report.render.summary import summarise

    try:
        summary = summarise(folder)
        stages = [st["stage"] for step in summary["steps"] for st in step["stages"]]
        test.add("rlprof summary", sorted(stages) == [DECODE, PREFILL], f"stages {', '.join(stages) or 'none'}")
        built = build_here(folder.parent, use_cache=False)
        write_page(built, folder.parent / "report.html")
        test.add("rlprof report", not built.nothing and not built.unread, str(folder.parent / "report.html"))
    except Exception as e:
        test.add("rlprof summary and report", False, f"{type(e).__name__}: {e}")
