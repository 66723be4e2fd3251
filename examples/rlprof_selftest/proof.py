"""What the self-test proves on a device beyond its own session: the GPU proof kit's checks.

Read back from the step folder the way users' tools read it:

- **kernels in every iteration**: each ``rlprof::iteration`` range launched at
  least one CUDA kernel (a kernel belongs to the iteration its launching
  runtime call, found by correlation id, started in; a replayed CUDA graph's
  kernels carry the ``cudaGraphLaunch``'s id);
- **memory snapshot in torch's viewer**: each rank's snapshot pickle opens
  with torch's own ``torch.cuda._memory_viz`` (the page behind
  pytorch.org/memory_viz): its segment and trace plots build;
- **merged trace**: ``rlprof merge`` of the step folder passes ``rlprof check``;
- **device time in the report**: the step report splits each rank's device
  time into compute, exposed communication, exposed memcpy and idle (communication needs a
  collective: none on one device).

Each check is skipped, with the reason, where the device has nothing to show.
"""

from __future__ import annotations

import bisect
import pickle
from pathlib import Path
from typing import Any

from rlprof_plugins.trace.format.check import check
from rlprof_plugins.trace.format.reader import TraceReader
from rlprof_plugins.stages import ITERATION_RE

LAUNCH_CATS = ("cuda_runtime", "cuda_driver")


def prove(test: Any, folder: Path, traces: list[Path]) -> None:
    """Add each check's part to ``test`` (a ``rlprof_selftest.SelfTest``)."""
    cuda = test.device == "cuda"
    counts = [n for t in traces for n in kernels_per_iteration(t)]
    test.add("kernels in every iteration", (bool(counts) and min(counts) > 0) if cuda else None,
             f"{len(counts)} iterations, kernels per iteration: min {min(counts, default=0)}, "
             f"max {max(counts, default=0)}" if cuda else f"{test.device}: no CUDA kernels")
    _memory_viz(test, folder)
    _merged(test, folder)
    _device_time(test, folder)


def kernels_per_iteration(path: Path) -> list[int]:
    """Kernels launched inside each ``rlprof::iteration`` range of one trace, in order."""
    spans: list[tuple[float, float]] = []
    launches: dict[Any, float] = {}
    kernels: list[Any] = []
    with TraceReader(path) as reader:
        for e in reader.events():
            cat, args = e.get("cat", ""), e.get("args") or {}
            if e.get("ph") == "X" and ITERATION_RE.match(str(e.get("name", ""))):
                spans.append((e["ts"], e["ts"] + e.get("dur", 0)))
            elif cat in LAUNCH_CATS and "correlation" in args:
                launches[args["correlation"]] = e.get("ts", 0)
            elif cat == "kernel" and "correlation" in args:
                kernels.append(args["correlation"])
    spans.sort()
    starts = [s for s, _ in spans]
    counts = [0] * len(spans)
    for correlation in kernels:
        ts = launches.get(correlation)
        k = bisect.bisect_right(starts, ts) - 1 if ts is not None else -1
        if k >= 0 and ts <= spans[k][1]:
            counts[k] += 1
    return counts


def _memory_viz(test: Any, folder: Path) -> None:
    from rlprof_plugins.report.plan.planner import memory_files

    files = memory_files(folder)
    if not files:
        test.add("memory snapshot in torch's viewer", None, "no memory snapshot on this device")
        return
    try:
        from torch.cuda import _memory_viz

        sizes = []
        for _, path in files:
            with open(path, "rb") as f:
                snapshot = pickle.load(f)  # our own file, just written: torch's viewer reads it the same way
            sizes.append(len(_memory_viz.segment_plot(snapshot)) + len(_memory_viz.trace_plot(snapshot)))
        test.add("memory snapshot in torch's viewer", all(s > 0 for s in sizes),
                 f"torch.cuda._memory_viz segment and trace plots of {len(files)} snapshot(s): "
                 f"{sum(sizes) / 1e3:.0f} KB of HTML")
    except Exception as e:
        test.add("memory snapshot in torch's viewer", False, f"{type(e).__name__}: {e}")


def _merged(test: Any, folder: Path) -> None:
    from rlprof_plugins.store.step_files import merge_folder

    try:
        outputs = [Path(p) for p in merge_folder(folder)]
        reports = [check(p) for p in outputs]
        test.add("merged trace checked", bool(reports) and all(r.ok for r in reports),
                 "; ".join(f"{r.path.name}: {r.events:,} events, {r.error_count} errors" for r in reports))
    except Exception as e:
        test.add("merged trace checked", False, f"{type(e).__name__}: {e}")


def _device_time(test: Any, folder: Path) -> None:
    from rlprof_plugins.report.render.build import build_here

    try:
        steps = build_here(folder.parent, use_cache=False).to_json()["steps"]
        device = next((t["device"] for row in steps for t in row.get("rank_time", {}).values() if t["device"]), None)
    except Exception as e:
        test.add("device time in the report", False, f"{type(e).__name__}: {e}")
        return
    if device is None:
        test.add("device time in the report", None if test.device != "cuda" else False,
                 f"{test.device}: the trace has no device events")
        return
    test.costs["device time (report)"] = ", ".join(f"{k[:-3]} {v:.1f} ms" for k, v in device.items())
    comm = "" if device.get("communication_ms") else " (communication 0: one device, no collective)"
    test.add("device time in the report", device.get("compute_ms", 0) > 0 and "idle_ms" in device,
             f"compute {device.get('compute_ms', 0):.1f} ms, idle {device.get('idle_ms', 0):.1f} ms{comm}")
