"""One row per global step: the numbers the step report compares across steps.

Read from each step folder's manifest (state, engine, ranks) and from its
worker traces with ``summary.trace_stats`` (one streaming pass per trace, in
processes for large steps). An iteration's time is its slowest rank's (the
engine waits for every rank), taken per stage (prefill, decode) for the
mean and the 90th percentile, beside the tokens and batch sizes the engine
scheduled, and which rank was the slowest how often (stragglers). rlprof's
own profiler pauses are counted apart. Each stage's mean
iteration time is compared with the previous step that recorded that stage.

A step whose traces cannot be read keeps its row, with the reason in
``error``: the report never drops a step it found.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

from ...store import manifest
from ..gz import file_size
from ..sources import plan
from ..summary import TraceStats, stats_of, step_dirs
from .cache import StepCache, fingerprint
from .memory import memory_files, step_memory
from ..sources import trace_files
from .ranks import files_of, operator_totals, rank_time, top_operators


def step_rows(root: str | Path, progress: Callable[[str], None] | None = None, *,
              steps: tuple[int, int] | None = None, cache: StepCache | None = None) -> dict[str, Any]:
    """``{"root", "steps": [row, ...], "steps_found"}``, steps in order, those in ``steps`` (first, last)
    only when given; ``FileNotFoundError`` for a missing root. ``cache`` keeps each step's row."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: not a directory")
    found = step_dirs(root)
    if cache is not None:
        cache.forget_others([d for _, d in found])
    rows: list[dict[str, Any]] = []
    previous: dict[str, float] = {}  # stage -> the last mean iteration ms seen
    operators_before = None
    for global_step, directory in found:
        if steps and (global_step is None or not steps[0] <= global_step <= steps[1]):
            continue
        row = dict(_cached_row(global_step, directory, progress, cache))
        row["change_pct"] = {}
        for stage, numbers in row["stages"].items():
            before = previous.get(stage)
            row["change_pct"][stage] = (round(100.0 * (numbers["mean_ms"] - before) / before, 1)
                                        if before else None)
            previous[stage] = numbers["mean_ms"]
        totals = row.pop("operator_ms")
        row["operators"] = top_operators(totals, operators_before)
        if row["ranks"]:
            operators_before = totals
        row["_operator_ms"] = totals  # for --compare; not part of the report's JSON
        rows.append(row)
    return {"root": str(root), "steps": rows, "steps_found": [s for s, _ in found]}


def _cached_row(global_step: int | None, directory: Path, progress: Callable[[str], None] | None,
                cache: StepCache | None) -> dict[str, Any]:
    key = fingerprint(directory, trace_files(directory) + [p for _, p in memory_files(directory)]) \
        if cache is not None else []
    row = cache.get(directory, key) if cache is not None else None
    if row is None:
        row = _row(global_step, directory, progress)
        if cache is not None and row["state"] not in ("recording", "exporting"):
            cache.put(directory, key, row)
    return row


def _row(global_step: int | None, directory: Path, progress: Callable[[str], None] | None) -> dict[str, Any]:
    data = manifest.read(directory) or {}
    traces = trace_files(directory)
    memory = memory_files(directory)
    row: dict[str, Any] = {
        "global_step": global_step, "directory": str(directory),
        "state": data.get("state", "no manifest"), "engine": data.get("engine"),
        "engine_version": data.get("engine_version"), "by_stage": data.get("by_stage"),
        "trace_bytes": sum(file_size(p) for p in traces),
        "files": files_of(directory, traces) + [{"path": str(p.relative_to(directory)), "bytes": file_size(p),
                                                 "role": "memory", "rank": rank, "stage": None}
                                                for rank, p in memory if p.is_file()],
        "ranks": [], "missing_ranks": [], "stages": {}, "rank_busy_ms": {}, "slowest_rank_iterations": {},
        "iterations": 0, "iteration_ms_total": 0.0, "span_ms": 0.0, "profiler_pauses": 0, "profiler_pause_ms": 0.0,
        "rank_time": {}, "timeline": [], "operator_ms": {"device": {}, "cpu": {}}, "error": None,
        "memory": step_memory(directory, memory),
    }
    if data.get("state") == "failed":
        errors = [w.get("error") for w in (data.get("writers") or {}).values() if w.get("error")]
        row["error"] = "; ".join(errors) or "the manifest says failed"
    try:
        p = plan(directory)
        stats = [st for group in stats_of(p.groups, progress) for st in group]
    except Exception as e:  # a corrupt or unreadable trace: the step stays, saying why
        row["error"] = f"{type(e).__name__}: {e}"
        return row
    row["missing_ranks"] = sorted({m for g in p.groups for m in g.missing})
    row["ranks"] = sorted({st.rank for st in stats})
    _add_iterations(row, stats)
    row["rank_time"] = rank_time(stats)
    row["operator_ms"] = operator_totals(stats)
    return row


def _add_iterations(row: dict[str, Any], stats: list[TraceStats]) -> None:
    slowest: dict[int, tuple] = {}  # iteration -> (stage, us, prefill, decode, batch, rank) of its slowest rank
    busy: dict[str, float] = {}  # rank -> summed iteration us
    pauses: dict[str, list[float]] = {}  # rank -> [count, us], over its stage files
    spans: dict[str, list[float]] = {}  # rank -> [first, last] us, over its stage files
    for st in stats:
        for index, stage, us, prefill, decode, batch in st.iteration_list:
            if index not in slowest or us > slowest[index][1]:
                slowest[index] = (stage or st.stage or "all", us, prefill, decode, batch, st.rank)
        busy[st.rank] = busy.get(st.rank, 0.0) + st.busy_us
        count_us = pauses.setdefault(st.rank, [0, 0.0])
        count_us[0] += st.pauses
        count_us[1] += st.pause_us
        if st.first_us is not None and st.last_us is not None:
            span = spans.setdefault(st.rank, [st.first_us, st.last_us])
            span[0], span[1] = min(span[0], st.first_us), max(span[1], st.last_us)
    by_stage: dict[str, list[tuple]] = {}
    for _, item in sorted(slowest.items()):
        by_stage.setdefault(item[0], []).append(item)
    for stage, items in sorted(by_stage.items()):
        ms = sorted(item[1] / 1000.0 for item in items)
        batches = [item[4] for item in items if item[4] is not None]
        row["stages"][stage] = {
            "iterations": len(items), "total_ms": round(sum(ms), 3), "mean_ms": round(sum(ms) / len(ms), 3),
            "p90_ms": round(_p90(ms), 3),
            "prefill_tokens": sum(item[2] or 0 for item in items), "decode_tokens": sum(item[3] or 0 for item in items),
            "mean_batch": round(sum(batches) / len(batches), 2) if batches else None,
        }
    row["span_ms"] = round(max((last - first for first, last in spans.values()), default=0.0) / 1000.0, 3)
    row["iterations"] = len(slowest)
    # the iteration timeline: [index, stage, ms of its slowest rank, batch, that rank]
    row["timeline"] = [[index, item[0], round(item[1] / 1000.0, 3), item[4], item[5]]
                       for index, item in sorted(slowest.items())]
    # which rank held each iteration up (the straggler question), and each rank's own busy time
    row["rank_busy_ms"] = {rank: round(us / 1000.0, 3) for rank, us in sorted(busy.items())}
    row["slowest_rank_iterations"] = {rank: sum(1 for item in slowest.values() if item[5] == rank)
                                      for rank in sorted(busy)}
    row["iteration_ms_total"] = round(sum(item[1] for item in slowest.values()) / 1000.0, 3)
    for numbers in row["stages"].values():  # how much of the step each stage took
        numbers["share_pct"] = round(100.0 * numbers["total_ms"] / row["iteration_ms_total"], 1) \
            if row["iteration_ms_total"] else None
    if pauses:
        count, us = max(pauses.values(), key=lambda c: c[1])
        row["profiler_pauses"], row["profiler_pause_ms"] = count, round(us / 1000.0, 3)


def _p90(sorted_ms: list[float]) -> float:
    """The nearest-rank 90th percentile."""
    return sorted_ms[max(0, math.ceil(0.9 * len(sorted_ms)) - 1)]


def flat_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One flat row per step and stage (CSV, dashboards)."""
    out = []
    for step in report["steps"]:
        for stage, numbers in (step["stages"] or {None: {}}).items():
            out.append({"global_step": step["global_step"], "state": step["state"], "engine": step["engine"],
                        "engine_version": step["engine_version"], "ranks": len(step["ranks"]), "stage": stage,
                        **{k: numbers.get(k) for k in ("iterations", "total_ms", "share_pct", "mean_ms", "p90_ms",
                                                       "prefill_tokens", "decode_tokens", "mean_batch")},
                        "change_pct": step["change_pct"].get(stage) if stage else None,
                        "profiler_pauses": step["profiler_pauses"], "profiler_pause_ms": step["profiler_pause_ms"],
                        "trace_bytes": step["trace_bytes"], "error": step["error"]})
    return out
