"""Where a step's time went, per global step, stage and rank, from the traces.

For each trace (one rank, one stage or the whole session) one streaming pass
collects:

- the recorded engine iterations (rlprof's ``rlprof::iteration N [stage]``
  ranges): how many, their summed wall time (the engine's busy time) and
  the span from the first start to the last end;
- the busiest operators: device kernels / memcpys by total time when the
  trace has any, and CPU operators (``cpu_op``) by *self* time (their time
  minus their nested operators', computed per thread), so nested ops are not
  counted twice.

rlprof's own profiler pauses (``rlprof::profiler pause``: chunk rotations
and the final stop) are counted apart, never as engine or operator time.

Then per step and stage: wall time (the slowest rank's busy time), the
per-rank imbalance (slowest / fastest busy time), the top operators over
all ranks, and the change of wall time against the previous step.

A trace without iteration ranges (a native engine's) is summarised by its
whole span and operators; its stage comes from its file name if known.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..store.layout import step_folders, step_of
from .stages import ITERATION_PREFIX, ITERATION_RE
from . import codec
from .clock import ts_ns
from .gz import file_size
from .naming import DEVICE_WORK_CATS
from .parallel import pool, processes_for
from .pauses import PAUSE_CAT, PAUSE_NAME
from .progress import Ticker, to_stderr
from .reader import TraceReader
from .time_split import DeviceTime, SelfTimes
from .sources import plan

CPU_OP_CATS = frozenset({"cpu_op"})
# torch records rlprof's ranges as user annotations; torch_npu as framework ops.
ITERATION_CATS = frozenset({"user_annotation", "cpu_op"})
TOP = 10


@dataclass
class TraceStats:
    rank: str
    stage: str | None
    path: Path
    iterations: int = 0
    busy_us: float = 0.0  # summed iteration durations
    first_us: float | None = None
    last_us: float | None = None
    device_ops: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    cpu_self: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    events: int = 0
    cpu_out_of_order: int = 0  # operators counted without nesting (see time_split.SelfTimes)
    pauses: int = 0  # rlprof's own profiler pauses (``trace.pauses``): not engine time
    pause_us: float = 0.0
    # each recorded iteration: (index, stage or None, duration us, prefill tokens, decode tokens, batch)
    iteration_list: list[tuple] = field(default_factory=list)
    device: DeviceTime = field(default_factory=DeviceTime)  # device work by class, stream idle time

    @property
    def span_us(self) -> float:
        return (self.last_us - self.first_us) if self.first_us is not None and self.last_us is not None else 0.0

    @property
    def wall_us(self) -> float:
        return self.busy_us if self.iterations else self.span_us


_SUMMARY_FIELDS = codec.fields_decoder("ph", "ts", "dur", "cat", "name", "pid", "tid")


def trace_stats(path: Path, rank: str, stage: str | None, report: bool = False) -> TraceStats:
    """One trace's numbers; ``report``: a progress line on stderr each second."""
    st = TraceStats(rank, stage, path)
    ticker = Ticker(to_stderr if report else None, f"{rank} {path.name}", file_size(path))
    cpu = SelfTimes(st.cpu_self)
    device = st.device
    device_ops = st.device_ops
    first = last = None
    with TraceReader(path) as reader, codec.gc_paused():
        for batch in reader.batches(_SUMMARY_FIELDS):
            ticker.update(reader.bytes_read)
            st.events += len(batch)
            for e in batch:
                if e.get("ph") != "X":
                    continue
                ts, dur = e.get("ts"), e.get("dur", 0)
                if ts.__class__ is str:  # torch_npu's absolute microseconds
                    ns = ts_ns(ts)
                    ts = None if ns is None else ns / 1000.0
                if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)):
                    continue
                end = ts + dur
                if first is None or ts < first:
                    first = ts
                if last is None or end > last:
                    last = end
                cat = e.get("cat")
                name = str(e.get("name", ""))
                if cat in DEVICE_WORK_CATS:
                    device_ops[name] += dur
                    device.add((e.get("pid"), e.get("tid")), cat, name, ts, dur)
                    continue
                if name == PAUSE_NAME and cat == PAUSE_CAT:
                    st.pauses += 1
                    st.pause_us += dur
                elif cat in ITERATION_CATS and name.startswith(ITERATION_PREFIX) and (m := ITERATION_RE.match(name)):
                    st.iterations += 1
                    st.busy_us += dur
                    st.iteration_list.append((int(m["index"]), m["stage"], dur, *(
                        int(m[k]) if m[k] is not None else None for k in ("prefill", "decode", "batch"))))
                elif cat in CPU_OP_CATS:
                    cpu.add((e.get("pid"), e.get("tid")), ts, end, name)
    cpu.close()
    st.first_us, st.last_us = first, last
    st.cpu_out_of_order = cpu.out_of_order
    return st


def step_dirs(root: Path) -> list[tuple[int | None, Path]]:
    """``root`` itself when it holds traces, else its ``global_step_N`` folders by N."""
    own = step_of(root)
    steps = step_folders(root)
    if steps and own is None:
        return steps
    return [(own, root)]


def summarise(root: str | Path, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: not a directory")
    steps_out = []
    unplaced, missing = [], []
    previous: dict[str | None, float] = {}
    for global_step, directory in step_dirs(root):
        p = plan(directory)
        unplaced += [{"path": str(path), "reason": why} for path, why in p.unplaced
                     if not why.startswith("frontend")]  # only worker traces are summarised
        stages_out = []
        missing += [{"global_step": global_step, "stage": g.stage or "all", "rank": m} for g in p.groups
                    for m in g.missing]
        for group, stats in zip(p.groups, stats_of(p.groups, progress)):
            if not stats:
                continue
            stage_key = group.stage or "all"
            entry = _stage_entry(stage_key, stats)
            before = previous.get(stage_key)
            entry["wall_ms_change_pct"] = (
                round(100.0 * (entry["wall_ms"] - before) / before, 1) if before else None)
            previous[stage_key] = entry["wall_ms"]
            stages_out.append(entry)
        steps_out.append({"global_step": global_step, "directory": str(directory), "stages": stages_out})
    return {"root": str(root), "steps": steps_out, "unplaced": unplaced, "missing": missing}


def stats_of(groups: list, progress: Callable[[str], None] | None) -> list[list[TraceStats]]:
    """``trace_stats`` of every worker trace of a step, per group; in
    processes (one per trace, up to the cores) when the step is large."""
    jobs = [(g_index, rf.path, rf.label, g.stage) for g_index, g in enumerate(groups)
            for rf in g.inputs if rf.role == "worker"]
    processes = processes_for(len(jobs), sum(file_size(path) for _, path, _, _ in jobs))
    report = progress is not None
    if report and jobs:
        progress(f"reading {len(jobs)} traces ({sum(file_size(j[1]) for j in jobs) / 1e6:,.0f} MB) with "
                 + (f"{processes} processes" if processes > 1 else "one process"))
    if processes > 1:
        with pool(processes) as workers:
            stats = list(workers.map(trace_stats, *zip(*[(path, label, stage, report)
                                                         for _, path, label, stage in jobs])))
    else:
        stats = [trace_stats(path, label, stage, report) for _, path, label, stage in jobs]
    out: list[list[TraceStats]] = [[] for _ in groups]
    for (g_index, *_), st in zip(jobs, stats):
        out[g_index].append(st)
    return out


def _top(totals: dict[str, float], n: int = TOP) -> list[dict[str, Any]]:
    ranked = sorted(totals.items(), key=lambda kv: -kv[1])[:n]
    return [{"name": name, "ms": round(us / 1000.0, 3)} for name, us in ranked]


def summed_operators(stats: list[TraceStats]) -> tuple[dict[str, float], dict[str, float]]:
    """Microseconds per device kernel and per CPU operator (self time), summed over ``stats``."""
    device: dict[str, float] = defaultdict(float)
    cpu: dict[str, float] = defaultdict(float)
    for s in stats:
        for k, v in s.device_ops.items():
            device[k] += v
        for k, v in s.cpu_self.items():
            cpu[k] += v
    return device, cpu


def _stage_entry(stage: str, stats: list[TraceStats]) -> dict[str, Any]:
    walls = [s.wall_us for s in stats]
    device, cpu = summed_operators(stats)
    fastest = min(walls)
    return {
        "stage": stage,
        "ranks": [{"rank": s.rank, "iterations": s.iterations, "busy_ms": round(s.wall_us / 1000.0, 3),
                   "span_ms": round(s.span_us / 1000.0, 3), "file": s.path.name,
                   "profiler_pauses": s.pauses, "profiler_pause_ms": round(s.pause_us / 1000.0, 3),
                   **({"cpu_ops_out_of_order": s.cpu_out_of_order} if s.cpu_out_of_order else {})}
                  for s in stats],
        "iterations": max(s.iterations for s in stats),
        "wall_ms": round(max(walls) / 1000.0, 3),
        "imbalance": round(max(walls) / fastest, 3) if fastest > 0 else None,
        # the engine waited for these, not for its own work: the longest rank's, apart from wall_ms
        "profiler_pauses": max(s.pauses for s in stats),
        "profiler_pause_ms": round(max(s.pause_us for s in stats) / 1000.0, 3),
        "top_device_ops": _top(device),
        "top_cpu_ops_self": _top(cpu),
    }


def render_table(summary: dict[str, Any]) -> str:
    lines = []
    rows = [("step", "stage", "iters", "wall ms", "vs prev", "ranks", "imbalance", "rlprof pauses", "busiest operator")]
    for step in summary["steps"]:
        for st in step["stages"]:
            top = (st["top_device_ops"] or st["top_cpu_ops_self"] or [{"name": "-", "ms": 0}])[0]
            change = st["wall_ms_change_pct"]
            rows.append((
                str(step["global_step"]) if step["global_step"] is not None else "-",
                st["stage"], str(st["iterations"]), f"{st['wall_ms']:.1f}",
                f"{change:+.1f}%" if change is not None else "",
                str(len(st["ranks"])), f"{st['imbalance']:.2f}x" if st["imbalance"] else "-",
                f"{st['profiler_pauses']} ({st['profiler_pause_ms']:.0f} ms)" if st["profiler_pauses"] else "-",
                f"{top['name'][:48]} ({top['ms']:.1f} ms)",
            ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for k, r in enumerate(rows):
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    for step in summary["steps"]:
        for st in step["stages"]:
            ops = st["top_device_ops"] or st["top_cpu_ops_self"]
            kind = "device kernels" if st["top_device_ops"] else "CPU operators (self time)"
            label = f"step {step['global_step']}" if step["global_step"] is not None else "traces"
            lines.append("")
            lines.append(f"{label}, {st['stage']}: busiest {kind}, all ranks")
            for op in ops[:5]:
                lines.append(f"  {op['ms']:10.3f} ms  {op['name'][:100]}")
    for u in summary["unplaced"]:
        lines.append(f"not summarised: {u['path']}: {u['reason']}")
    for m in summary.get("missing", []):
        lines.append(f"warning: step {m['global_step']} ({m['stage']}) lacks {m['rank']}")
    return "\n".join(lines)
