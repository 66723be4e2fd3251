"""Per step: where each rank's time went, its operators, and the step's files.

A rank's recorded span splits into its engine iterations, rlprof's own
profiler pauses and the time between iterations (the engine waiting for
work); inside it, CPU operator self time (collectives apart) and, where the
trace has device events, the device time of its recorded iterations as a
partition (``trace.analysis.device_time``: compute, exposed communication, exposed
memcpy and idle add up to the window), for the rank and for each stage (the
sum of the stage's iterations, each its own window).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ...trace.analysis.trace_stats import TraceStats
from ...trace.analysis.device_time import add, in_ms
from ...trace.analysis.communication import is_communication

PERFETTO = "https://ui.perfetto.dev: Open trace file (traces over 1 GB: trace_processor --httpd FILE, then Perfetto)"


def rank_time(stats: list[TraceStats]) -> dict[str, dict[str, Any]]:
    """``{rank: {span_ms, iterations_ms, pause_ms, between_ms, cpu_ops_ms, cpu_comm_ms, device,
    device_by_stage}}`` over its files."""
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
