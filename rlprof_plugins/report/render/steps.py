"""One row per global step: the numbers the step report compares across steps.

A traced step's row is read from its view and its worker traces' passes, numbered as ``rlprof summary``
numbers them (``trace.analysis.step_numbers``); a measured step without a trace gets a row of its own
(``measured_rows``) and a traced one carries its measured numbers beside. A step whose files cannot be
read keeps its row, the reason in ``error`` or ``unreadable``: the report never drops what it found.
Only the newest ``DETAILED`` steps (and the two compared) keep their details, so memory stays flat in
the number of steps.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable

from ...trace.analysis.communication import is_communication
from ...trace.analysis.device_time import add, in_ms
from ...trace.analysis.step_numbers import (change_pct, imbalance, operator_changes, slowest_iterations, stage_numbers,
                                  stage_operators, straggler, timeline)
from ...trace.analysis.trace_stats import TraceStats
from ...store.layout import STEPS_DIR
from ..execute.passes import Passes
from .flame import stage_python, view as flame_view
from ...step_logs.requests import held_step
from ...metrics.tail import longest_tail
from ..plan.measured_rows import measured_row
from ..execute.memory_pass import step_memory
from .anomalies import add_anomalies
from ..plan.view import RootView, ServerView, StepView

DETAILED = 20  # the newest steps shown in full
TOP_OPERATORS = 15
DETAILS = ("timeline", "iteration_device", "rank_time", "operators", "python", "files", "memory",
           "slowest_rank_iterations", "rank_busy_ms")


def server_rows(view: RootView, server: ServerView, passes: Passes, progress: Callable[[str], None] | None = None,
                keep: tuple[int, ...] = ()) -> dict[str, Any]:
    """One server's rows of a planned root: ``{"root", "steps": [row, ...], "steps_found", "warnings"}``; the
    steps in ``keep`` keep their details and their operators (``_stage_ops``) for a comparison."""
    found = ServerSteps(view, server, passes)
    rows = [found.row(step, folder, progress) for step, folder in found.chosen]
    return {"root": view.root, "steps": in_sequence(rows, keep), "steps_found": server.steps_found,
            "warnings": server.warnings}


class ServerSteps:
    """One server's chosen steps, traced (their folders' views) and measured (their step logs' numbers),
    before any row is made: a fleet makes full rows only for the replicas it shows."""

    def __init__(self, view: RootView, server: ServerView, passes: Passes) -> None:
        self.view, self.server, self.passes = view, server, passes
        self.logs = view.shown(f"{server.rel}/{STEPS_DIR}" if server.rel else STEPS_DIR)
        self.chosen: list[tuple[int | None, StepView | None]] = sorted(
            [(s.step, s) for s in server.steps] + [(s, None) for s in server.measured_only],
            key=lambda sf: (sf[0] is not None, sf[0] if sf[0] is not None else -1))

    def row(self, global_step: int | None, folder: StepView | None,
            progress: Callable[[str], None] | None = None) -> dict[str, Any]:
        """The step's row: its traces' numbers, or its measured ones."""
        if folder is None:
            row = measured_row(global_step, self.server.measured[global_step], self.logs)
        else:
            row = _row(self.view, folder, progress, self.passes)
            row["traced"], row["measured"] = True, self.server.measured.get(global_step)
            row["tail"] = longest_tail((row["measured"] or {}).get("rollout"))
        row["requests"] = held_step(self.server.periods, row.get("measured"))
        add_anomalies(row, self.view, self.server.anomalies, self.passes)
        return row


def in_sequence(rows: list[dict[str, Any]], keep: tuple[int, ...] = ()) -> list[dict[str, Any]]:
    """Rows in step order, each with its changes against the step before (stage means, the step's
    mean, operators per iteration); only the newest ``DETAILED`` traced steps (and those in ``keep``)
    keep their details."""
    with_trace = [k for k, row in enumerate(rows) if row.get("traced", True)]
    detailed = set(with_trace[-DETAILED:]) | {k for k in with_trace if rows[k]["global_step"] in keep}
    previous: dict[str, float] = {}  # stage -> the last mean iteration ms seen
    previous_step = None
    before = None  # (stage operators, iterations per stage) of the last step read
    before_python = None  # (its Python frames per stage, iterations per stage)
    for k, row in enumerate(rows):
        row["change_pct"] = {}
        for stage, numbers in row["stages"].items():
            row["change_pct"][stage] = change_pct(previous.get(stage), numbers["mean_ms"])
            previous[stage] = numbers["mean_ms"]
        row["step_change_pct"] = change_pct(previous_step, row["mean_ms"])
        previous_step = row["mean_ms"] if row["iterations"] else previous_step
        ops, counts = row.pop("stage_operators"), {s: n["iterations"] for s, n in row["stages"].items()}
        python = row.pop("stage_python", None)
        if k in detailed:
            row["operators"] = operator_changes(ops, counts, *(before or (None, None)), n=TOP_OPERATORS)
            if python:
                row["python"] = flame_view(python, counts, *(before_python or (None, None)))
        if row["ranks"] and row["traced"]:
            before, before_python = (ops, counts), (python, counts)
        if row["global_step"] in keep:
            row["_stage_ops"] = ops  # for --compare; not part of the report's JSON
        if k not in detailed:
            for key in DETAILS:
                row.pop(key, None)
    return rows


def _row(view: RootView, folder: StepView, progress: Callable[[str], None] | None, passes: Passes) -> dict[str, Any]:
    row: dict[str, Any] = {
        "global_step": folder.step, "directory": view.shown(folder.rel), "state": folder.state,
        **folder.manifest, "trace_bytes": folder.trace_bytes, "files": folder.files,
        "ranks": [], "missing_ranks": [], "missing_lines": [], "assumed_ranks": [], "unreadable": [], "sources": [],
        "without_iterations": [],
        "stages": {}, "rank_busy_ms": {}, "slowest_rank_iterations": {}, "straggler": None, "imbalance": None,
        "iterations": 0, "iteration_ms_total": 0.0, "mean_ms": None, "span_ms": 0.0,
        "profiler_pauses": 0, "profiler_pause_ms": 0.0, "rank_time": {}, "timeline": [], "iteration_device": [],
        "stage_operators": {}, "stage_python": None, "error": folder.error,
        "memory": step_memory(folder.rel, folder.memory, passes.memory),
    }
    if not folder.read:  # the folder itself could not be read: the step stays, saying why
        return row
    every = passes.traces(folder.jobs, progress)
    stats = [st for st in every if st.error is None]
    row["unreadable"] = [st.error for st in every if st.error]
    row["missing_ranks"] = sorted({m for g in folder.groups for m in g.missing})
    row["missing_lines"] = list(dict.fromkeys(g.missing_line for g in folder.groups if g.missing_line))
    row["assumed_ranks"] = folder.assumed
    row["ranks"] = sorted({st.rank for st in stats})
    row["sources"] = sorted({st.source for st in stats if st.source})
    row["without_iterations"] = sorted(str(st.path.relative_to(folder.rel)) for st in stats if not st.iteration_list)
    row["rank_time"] = rank_time(stats)
    _add_iterations(row, stats)
    row["stage_operators"] = stage_operators(stats)
    row["stage_python"] = stage_python(stats)
    return row


def _add_iterations(row: dict[str, Any], stats: list[TraceStats]) -> None:
    iterations = slowest_iterations(stats)
    row["stages"] = stage_numbers(iterations, stats)
    row["iterations"] = len(iterations)
    row["iteration_ms_total"] = round(sum(it.us for it in iterations) / 1000.0, 3)
    row["mean_ms"] = round(row["iteration_ms_total"] / len(iterations), 3) if iterations else None
    row["timeline"] = timeline(iterations)
    # each iteration's device time as its slowest rank spent it (``device_time``: compute, exposed all-reduce ...)
    device = {(st.rank, tuple(item[0])): part for st in stats for item, part in zip(st.iteration_list,
                                                                                     st.iteration_device)}
    row["iteration_device"] = [in_ms(device.get((it.rank, it.key))) for it in iterations] if device else []
    busy: dict[str, float] = defaultdict(float)
    pauses: dict[str, list[float]] = {}  # rank -> [count, us], over its stage files
    for st in stats:
        busy[st.rank] += st.busy_us
        count_us = pauses.setdefault(st.rank, [0, 0.0])
        count_us[0] += st.pauses
        count_us[1] += st.pause_us
    times = row["rank_time"]  # by rank, in order
    row["span_ms"] = max((t["span_ms"] for t in times.values()), default=0.0)
    # which rank held each iteration up (the straggler question), and each rank's own busy time
    row["rank_busy_ms"] = {rank: t["iterations_ms"] for rank, t in times.items()}
    row["slowest_rank_iterations"] = {rank: sum(1 for it in iterations if it.rank == rank) for rank in times}
    row["straggler"] = straggler(iterations)
    row["imbalance"] = imbalance(busy)
    if pauses:
        count, us = max(pauses.values(), key=lambda c: c[1])
        row["profiler_pauses"], row["profiler_pause_ms"] = count, round(us / 1000.0, 3)


def rank_time(stats: list[TraceStats]) -> dict[str, dict[str, Any]]:
    """Where each rank's time went, over its files: its recorded span split into its iterations, rlprof's
    own profiler pauses and the time between iterations (the engine waiting for work); CPU operator self
    time, collectives apart; and the device partition of its iterations (``trace.analysis.device_time``:
    compute, exposed communication, exposed memcpy and idle add up to the window), whole and per stage.
    ``{rank: {span_ms, iterations_ms, pause_ms, between_ms, cpu_ops_ms, cpu_comm_ms, device, device_by_stage}}``."""
    grouped: dict[str, list[TraceStats]] = defaultdict(list)
    for st in stats:
        grouped[st.rank].append(st)
    out = {}
    for rank, mine in sorted(grouped.items()):
        firsts = [s.first_us for s in mine if s.first_us is not None]
        lasts = [s.last_us for s in mine if s.last_us is not None]
        span = (max(lasts) - min(firsts)) if firsts and lasts else 0.0
        busy, paused = sum(s.busy_us for s in mine), sum(s.pause_us for s in mine)
        cpu = [(name, us) for s in mine for name, us in s.cpu_self.items()]
        device, by_stage = _device_of(mine)
        out[rank] = {
            "span_ms": _ms(span), "iterations_ms": _ms(busy), "pause_ms": _ms(paused),
            "between_ms": _ms(max(0.0, span - busy - paused)),
            "cpu_ops_ms": _ms(sum(us for name, us in cpu if not is_communication(name))),
            "cpu_comm_ms": _ms(sum(us for name, us in cpu if is_communication(name))),
            "device": device, "device_by_stage": by_stage,
        }
    return out


def _device_of(stats: list[TraceStats]) -> tuple[dict[str, Any] | None, dict[str, dict[str, Any]]]:
    """The rank's device partition over its files (a by-stage session's files: their sums), and per stage
    the sum of its iterations' partitions."""
    total = None
    stages: dict[str, dict[str, float] | None] = {}
    for st in stats:
        total = add(total, st.device)
        for (_, stage, *_), part in zip(st.iteration_list, st.iteration_device):
            stages[stage] = add(stages.get(stage), part)
    return in_ms(total), {stage: in_ms(us) for stage, us in sorted(stages.items()) if us is not None}


def _ms(us: float) -> float:
    return round(us / 1000.0, 3)


def flat_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One flat row per step and stage (CSV, dashboards)."""
    out = []
    for step in report["steps"]:
        for stage, numbers in (step["stages"] or {None: {}}).items():
            out.append({"global_step": step["global_step"], "state": step["state"], "engine": step["engine"],
                        "engine_version": step["engine_version"], "ranks": len(step["ranks"]), "stage": stage,
                        **{k: numbers.get(k) for k in ("iterations", "total_ms", "share_pct", "mean_ms", "p90_ms",
                                                       "prefill_tokens", "decode_tokens", "mean_batch",
                                                       "imbalance")},
                        "change_pct": step["change_pct"].get(stage) if stage else None,
                        "step_mean_ms": step["mean_ms"], "step_change_pct": step["step_change_pct"],
                        "straggler": (step["straggler"] or {}).get("rank"),
                        "straggler_share_pct": (step["straggler"] or {}).get("share_pct"),
                        "profiler_pauses": step["profiler_pauses"], "profiler_pause_ms": step["profiler_pause_ms"],
                        "trace_bytes": step["trace_bytes"], "sources": " ".join(step["sources"]),
                        "error": step["error"], "unreadable": "; ".join(step["unreadable"]),
                        **({"replicas": len(step["replicas"]), "slowest_replica": step["slowest_replica"],
                            "replica_spread": step["replica_spread"], "ranked_by": step.get("ranked_by")}
                           if "replicas" in step else {})})
    return out
