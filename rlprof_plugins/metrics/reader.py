"""The step logs read back (``steps/<rank>.jsonl``), and a measured step's numbers in the report's terms.

Reading skips a torn line (a crash mid-write) with a warning naming the
file and line, never fails on one; records of the same step and rank (a
server restarted inside a step) are combined (``StepRecord.combine``).

A measured step has each rank's aggregates, not each iteration, so an
iteration cannot be matched across ranks as in a trace. The step's numbers
take the slowest rank's where a trace takes the slowest rank per iteration:
a stage's iterations and total are the rank's with the largest total, its
mean that total over those iterations; p50 and p90 come from the combined
histogram's buckets (their upper bounds, capped at the largest time seen:
the resolution Prometheus has too). Imbalance and straggler are by busy time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .log import SUFFIX, step_folder
from .record import BUCKETS_MS, NotARecord, StepRecord


def read_steps(root: str | Path) -> tuple[dict[int | None, dict[str, StepRecord]], list[str]]:
    """``{global_step: {rank: record}}`` from ``ROOT/steps/*.jsonl`` (rotated files first), and the warnings."""
    out: dict[int | None, dict[str, StepRecord]] = {}
    warnings: list[str] = []
    folder = step_folder(root)
    if not folder.is_dir():
        return out, warnings
    files = sorted(folder.glob(f"*{SUFFIX}.1")) + sorted(folder.glob(f"*{SUFFIX}"))
    for path in files:
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError as e:
            warnings.append(f"{path}: {e.strerror or e}")
            continue
        for number, line in enumerate(lines, 1):
            try:
                record = StepRecord.decode(line)
            except NotARecord:
                warnings.append(f"{path}:{number}: not a whole step record (a write cut short?): skipped")
                continue
            ranks = out.setdefault(record.global_step, {})
            rank = record.rank
            ranks[rank] = ranks[rank].combine(record) if rank in ranks else record
    return out, warnings


def quantile_ms(counts: list[int], q: float, largest: float) -> float | None:
    n = sum(counts)
    if not n:
        return None
    seen = 0
    for bound, count in zip(BUCKETS_MS, counts):
        seen += count
        if seen >= q * n:
            return round(min(bound, largest), 3)
    return round(largest, 3)


def measured_numbers(ranks: dict[str, StepRecord]) -> dict[str, Any]:
    """``{"stages": {stage: numbers}, "iterations", "iteration_ms_total", "mean_ms", "imbalance", "straggler",
    "ranks", "idle_ms", "started_at", "ended_at"}`` of one measured step."""
    stages: dict[str, dict[str, Any]] = {}
    for stage in sorted({s for r in ranks.values() for s in r.stages}):
        mine = [r.stages[stage] for r in ranks.values() if stage in r.stages]
        slowest = max(mine, key=lambda t: t.total_ms)
        counts = [sum(c) for c in zip(*(t.counts for t in mine))]
        largest = max(t.max_ms for t in mine)
        n = slowest.iterations
        stages[stage] = {
            "iterations": n, "total_ms": slowest.total_ms, "mean_ms": round(slowest.total_ms / n, 3) if n else None,
            "p50_ms": quantile_ms(counts, 0.5, largest), "p90_ms": quantile_ms(counts, 0.9, largest), "max_ms": largest,
            "prefill_tokens": slowest.prefill_tokens, "decode_tokens": slowest.decode_tokens,
            "mean_batch": round(slowest.batch_sum / n, 2) if n else None,
        }
    total = sum(s["total_ms"] for s in stages.values())
    for s in stages.values():
        s["share_pct"] = round(100.0 * s["total_ms"] / total, 1) if total else None
    busy = {rank: r.busy_ms for rank, r in ranks.items()}
    iterations = sum(s["iterations"] for s in stages.values())
    slow = max(sorted(busy), key=lambda rank: busy[rank]) if busy else None
    return {"stages": stages, "iterations": iterations, "iteration_ms_total": round(total, 3),
            "mean_ms": round(total / iterations, 3) if iterations else None,
            "imbalance": round(max(busy.values()) / min(busy.values()), 3) if len(busy) > 1 and min(busy.values()) > 0
            else None,
            "straggler": {"rank": slow, "share_pct": None, "by": "busy time"} if slow and len(busy) > 1 else None,
            "ranks": sorted(ranks), "idle_ms": max((r.idle_ms for r in ranks.values()), default=0.0),
            "started_at": min(r.started_at for r in ranks.values()),
            "ended_at": max(r.ended_at for r in ranks.values())}
