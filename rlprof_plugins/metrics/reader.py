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
        _add_lines(lines, path, 1, out, warnings)
    return out, warnings


def _add_lines(lines: list[str], path: Path, first: int, into: dict[int | None, dict[str, StepRecord]],
               warnings: list[str]) -> None:
    """Each line's record into ``{global_step: {rank: record}}`` (a step's two parts combined); a line that
    is not a whole record is named (``path:number``, numbered from ``first``) and skipped."""
    for number, line in enumerate(lines, first):
        try:
            record = StepRecord.decode(line)
        except NotARecord:
            warnings.append(f"{path}:{number}: not a whole step record (a write cut short?): skipped")
            continue
        ranks = into.setdefault(record.global_step, {})
        ranks[record.rank] = ranks[record.rank].combine(record) if record.rank in ranks else record


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


# ---- read again after one more step: only what was appended ------------------------
STATE_VERSION = 2  # 2: the state keeps the steps read, not their numbers (the caller keeps those)
RECENT = 4  # the newest steps whose records are kept, for a rank's line that comes after the others'


def measured_incrementally(root: str | Path, state: dict[str, Any] | None
                           ) -> tuple[dict[int, dict[str, Any]], list[str], dict[str, Any], bool]:
    """``({global_step: measured numbers}, warnings, state, whole)``, reading only what the step logs
    gained since ``state`` (a small JSON value the caller keeps between runs; None: read everything).
    The numbers are those of the steps the new lines touched, the same as ``read_steps`` and
    ``measured_numbers`` give for them; ``whole`` says every step was read (the caller drops what it
    kept). The caller keeps the numbers of earlier steps: a state is a few offsets and the newest
    ``RECENT`` steps' records, whatever the number of steps. The logs are appended to, a whole line at
    a time; a log rotated, rewritten or gone, or a line for a step older than the newest ``RECENT``
    ones already read, makes it read everything again."""
    folder = step_folder(root)
    if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
        state = None
    old_files = dict(state["files"]) if state else {}
    files = sorted(folder.glob(f"*{SUFFIX}.1")) + sorted(folder.glob(f"*{SUFFIX}")) if folder.is_dir() else []
    fresh: dict[int | None, dict[str, StepRecord]] = {}
    warnings = list(state["warnings"]) if state else []
    torn: list[str] = []  # said this time, not kept: the line may be whole next time
    offsets: dict[str, list[int]] = {}
    for path in files:
        try:
            st = path.stat()
            before = old_files.pop(path.name, None)
            start = 0
            if before is not None:
                if before[0] != st.st_ino or st.st_size < before[1]:
                    return measured_incrementally(root, None)  # rotated or rewritten
                start = before[1]
            with path.open("rb") as f:
                f.seek(start)
                data = f.read(st.st_size - start)
        except OSError as e:
            warnings.append(f"{path}: {e.strerror or e}")
            continue
        whole = data.rfind(b"\n") + 1  # a line still being written is read next time
        offsets[path.name] = [st.st_ino, start + whole]
        if data[whole:].strip():
            torn.append(f"{path}: its last line is not whole (a write cut short, or one being written): "
                        "not read yet")
        first_line = (state or {}).get("lines", {}).get(path.name, 0) if before is not None else 0
        lines = data[:whole].decode(errors="replace").splitlines()
        _add_lines(lines, path, first_line + 1, fresh, warnings)
        offsets[path.name].append(first_line + len(lines))
    if state and old_files:  # a log that was read before is gone
        return measured_incrementally(root, None)
    known = set(state["steps"]) if state else set()
    # the newest steps' records as the state keeps them (JSON), read only for a step the new lines touch
    recent: dict[int, dict[str, Any]] = {int(k): v for k, v in (state["recent"].items() if state else ())}
    numbers: dict[int, dict[str, Any]] = {}
    for step, ranks in fresh.items():
        if not isinstance(step, int):
            continue
        if state and step in known and step not in recent:
            return measured_incrementally(root, None)  # a late line of an old step: read it all again
        merged = {rank: StepRecord.from_json(r) for rank, r in recent.get(step, {}).items()}
        for rank, record in ranks.items():
            merged[rank] = merged[rank].combine(record) if rank in merged else record
        recent[step] = {rank: r.to_json() for rank, r in merged.items()}
        numbers[step] = measured_numbers(merged)
        known.add(step)
    newest = sorted(recent)[-RECENT:]
    new_state = {"version": STATE_VERSION, "files": {k: v[:2] for k, v in offsets.items()},
                 "lines": {k: v[2] for k, v in offsets.items()}, "warnings": warnings, "steps": sorted(known),
                 "recent": {str(k): recent[k] for k in newest}}
    return numbers, warnings + torn, new_state, state is None
