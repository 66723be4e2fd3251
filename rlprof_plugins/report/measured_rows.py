"""The report's rows for steps measured by ``step_metrics`` (``ROOT/steps/<rank>.jsonl``).

Every RL step the engine ran has numbers there, traced or not: a step with
no trace folder gets its own row (state ``measured``, "metrics only"), a
traced step keeps its trace's numbers and carries the measured ones beside
(``measured``). How a measured step's numbers are taken (each rank's
aggregates, the slowest rank's) is ``metrics.reader``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..metrics.log import step_folder
from ..metrics.reader import measured_incrementally
from .cache import StepCache

STATE = "step-metrics"  # the step logs' reader's state in the report's cache


def measured_steps(root: Path, cache: StepCache | None = None) -> tuple[dict[int, dict[str, Any]], list[str]]:
    """``{global_step: measured numbers}`` (steps with a number only) and the warnings of reading them;
    with a ``cache``, only what the logs gained since the last run is read."""
    before = cache.state(STATE) if cache else None
    numbers, warnings, state = measured_incrementally(root, before)
    if cache is not None and (state["files"] or before is not None) and state != before:
        cache.keep_state(STATE, state)
    return numbers, warnings


def measured_row(global_step: int, numbers: dict[str, Any], root: Path, folder: str | None = None) -> dict[str, Any]:
    """A row for a step that was measured and not traced (``folder``: the root's step-log folder, as text,
    where the caller makes many rows)."""
    return {
        "global_step": global_step, "directory": folder or str(step_folder(root)), "state": "measured", "engine": None,
        "engine_version": None, "by_stage": None, "trace_bytes": 0, "files": [], "ranks": numbers["ranks"],
        "missing_ranks": [], "unreadable": [], "sources": ["step_metrics"], "without_iterations": [],
        "stages": {s: {k: v for k, v in n.items() if k not in ("p50_ms", "max_ms")} for s, n in
                   numbers["stages"].items()},
        "rank_busy_ms": {}, "slowest_rank_iterations": {}, "straggler": numbers["straggler"],
        "imbalance": numbers["imbalance"], "iterations": numbers["iterations"],
        "iteration_ms_total": numbers["iteration_ms_total"], "mean_ms": numbers["mean_ms"],
        "span_ms": round(1000.0 * (numbers["ended_at"] - numbers["started_at"]), 3), "profiler_pauses": 0,
        "profiler_pause_ms": 0.0, "rank_time": {}, "timeline": [], "stage_operators": {}, "error": None,
        "memory": {}, "traced": False, "measured": numbers,
    }
