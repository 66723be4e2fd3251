"""The step logs read back (``steps/<rank>.jsonl``), and a measured step's numbers in the report's terms.

Reading skips a torn line (a crash mid-write) with a warning naming the
file and line, never fails on one; records of the same step and rank (a
server restarted inside a step) are combined (``StepRecord.combine``).

A measured step has each rank's aggregates, not each iteration, so an
iteration cannot be matched across ranks as in a trace. The step's numbers
are one real rank's, its slowest: the rank whose step took longest (its time
in iterations, ``busy_ms``). Every stage's iterations, total, mean and
percentiles are that rank's, so they add up to a step one rank ran; summing
each stage's slowest rank would make a rank that does not exist (data-parallel
ranks take turns being slow), and percentiles over every rank's histogram
mixed would describe no rank. Each stage's own slowest rank is beside it
(``slowest_rank``, ``slowest_rank_total_ms``). p50 and p90 come from the
rank's histogram buckets (their upper bounds, capped at the largest time seen:
the resolution Prometheus has too). Imbalance and straggler are by busy time.
Records without a step (iterations before the trainer named one) are a step
of their own, ``None``, in both reads.
"""

from __future__ import annotations

import heapq
import itertools
from pathlib import Path
from typing import Any, Iterator

from ..metrics.log import ROTATED, SUFFIX, step_folder
from ..metrics.phases import totals as phase_totals
from ..metrics.record import BUCKETS_MS, NotARecord, StepRecord


def read_steps(root: str | Path) -> tuple[dict[int | None, dict[str, StepRecord]], list[str]]:
    """``{global_step: {rank: record}}`` from ``ROOT/steps/*.jsonl`` (rotated files first), and the warnings."""
    out: dict[int | None, dict[str, StepRecord]] = {}
    warnings: list[str] = []
    folder = step_folder(root)
    if not folder.is_dir():
        return out, warnings
    files = sorted(folder.glob(f"*{ROTATED}")) + sorted(folder.glob(f"*{SUFFIX}"))
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


def step_span(ranks: dict[str, StepRecord]) -> dict[str, float]:
    """``{"started_at", "ended_at"}`` of one measured step (wall seconds): its earliest rank's start to its latest
    rank's end; empty where no rank measured it."""
    if not ranks:
        return {}
    return {"started_at": min(r.started_at for r in ranks.values()), "ended_at": max(r.ended_at for r in ranks.values())}


def measured_numbers(ranks: dict[str, StepRecord]) -> dict[str, Any]:
    """``{"stages": {stage: numbers}, "iterations", "iteration_ms_total", "mean_ms", "slowest_rank", "imbalance",
    "straggler", "ranks", "idle_ms", "started_at", "ended_at", "generation_ended_at", "rollout"}`` of one measured
    step: its slowest rank's; ``generation_ended_at`` is when its last rank's last iteration ended (wall seconds;
    None from records that do not say); ``rollout`` holds each rank's tail (``tail.TailRecord``, with
    ``tail_share``) where its engine said its batches; ``phases`` each rank's RL phases (``phases_of``)."""
    busy = {rank: r.busy_ms for rank, r in ranks.items()}
    slow = max(sorted(busy), key=lambda rank: busy[rank]) if busy else None
    stages: dict[str, dict[str, Any]] = {}
    for stage in sorted({s for r in ranks.values() for s in r.stages}):
        theirs = sorted((rank, r.stages[stage]) for rank, r in ranks.items() if stage in r.stages)
        slowest_rank, slowest = max(theirs, key=lambda item: item[1].total_ms)
        mine = ranks[slow].stages.get(stage)
        if mine is None:  # a stage the slowest rank did not run: its slowest rank alone says it ran
            stages[stage] = {"iterations": 0, "total_ms": 0.0, "mean_ms": None, "p50_ms": None, "p90_ms": None,
                             "max_ms": None, "prefill_tokens": 0, "decode_tokens": 0, "mean_batch": None}
        else:
            n = mine.iterations
            stages[stage] = {
                "iterations": n, "total_ms": mine.total_ms, "mean_ms": round(mine.total_ms / n, 3) if n else None,
                "p50_ms": quantile_ms(mine.counts, 0.5, mine.max_ms),
                "p90_ms": quantile_ms(mine.counts, 0.9, mine.max_ms), "max_ms": mine.max_ms, "prefill_tokens": mine.prefill_tokens, "decode_tokens": mine.decode_tokens,
                "mean_batch": round(mine.batch_sum / n, 2) if n else None,
            }
        stages[stage].update(slowest_rank=slowest_rank, slowest_rank_total_ms=slowest.total_ms)
    total = sum(s["total_ms"] for s in stages.values())
    for s in stages.values():
        s["share_pct"] = round(100.0 * s["total_ms"] / total, 1) if total else None
    iterations = sum(s["iterations"] for s in stages.values())
    return {"stages": stages, "iterations": iterations, "iteration_ms_total": round(total, 3), "slowest_rank": slow,
            "mean_ms": round(total / iterations, 3) if iterations else None,
            "imbalance": round(max(busy.values()) / min(busy.values()), 3) if len(busy) > 1 and min(busy.values()) > 0
            else None,
            "straggler": {"rank": slow, "share_pct": None, "by": "busy time"} if slow and len(busy) > 1 else None,
            "ranks": sorted(ranks), "idle_ms": max((r.idle_ms for r in ranks.values()), default=0.0),
            **step_span(ranks),
            "generation_ended_at": max((r.last_iteration_at for r in ranks.values() if r.last_iteration_at is not None),
                                       default=None),
            "rollout": rollout_of(ranks), "phases": phases_of(ranks)}


def phases_of(ranks: dict[str, StepRecord]) -> dict[str, dict[str, Any]]:
    """Each rank's RL phases of one step, where it ran any: ``{"totals": {phase: {"count", "ms"}}, "total_ms",
    "records": [PhaseRecord as JSON, in order], "dropped", "after_generation_ms"}``. ``after_generation_ms`` is the time
    from the rank's last iteration to the first phase after it (the trainer's turn: generation ended and the
    engine waited for the trainer's next call); that phase's record holds it too."""
    out = {}
    for rank, r in sorted(ranks.items()):
        if not r.phases and not r.phases_dropped:
            continue
        records = [p.to_json() for p in r.phases]
        last = r.last_iteration_at
        first = next((k for k, p in enumerate(r.phases) if last is not None and p.started_at >= last), None)
        after = round((r.phases[first].started_at - last) * 1e3, 3) if first is not None else None
        if first is not None:
            records[first]["after_generation_ms"] = after
        out[rank] = {"totals": phase_totals(r.phases), "total_ms": round(sum(p.ms for p in r.phases), 3),
                     "records": records, "dropped": r.phases_dropped,
                     "after_generation_ms": after}
    return out


def rollout_of(ranks: dict[str, StepRecord]) -> dict[str, dict[str, Any]]:
    """Each rank's tail of one step (``tail.TailRecord`` as JSON, with ``tail_share``), where its engine said its
    batches."""
    return {rank: {**r.tail.to_json(), "tail_share": round(r.tail.tail_share, 4)}
            for rank, r in sorted(ranks.items()) if r.tail is not None}


# ---- read again after one more step: only what was appended ------------------------
STATE_VERSION = 2  # 2: the state keeps the steps read, not their numbers (the caller keeps those)
RECENT = 4  # the newest steps whose records are kept, for a rank's line that comes after the others'
BLOCK = 1 << 16  # bytes of a log read at a time (each rank's log is read beside the others)


def measured_incrementally(root: str | Path, state: dict[str, Any] | None
                           ) -> tuple[dict[int | None, dict[str, Any]], list[str], dict[str, Any], bool]:
    """``({global_step: measured numbers}, warnings, state, whole)`` (``None``: the records without a step, as
    ``read_steps`` keeps them), reading only what the step logs
    gained since ``state`` (a small JSON value the caller keeps between runs; None: read everything).
    The numbers are those of the steps the new lines touched, the same as ``read_steps`` and
    ``measured_numbers`` give for them; ``whole`` says every step was read (the caller drops what it
    kept). The caller keeps the numbers of earlier steps: a state is a few offsets and the newest
    ``RECENT`` steps' records, whatever the number of steps. The logs are appended to, a whole line at
    a time; a log rotated, rewritten or gone, or a line for a step older than the newest ``RECENT``
    ones already read, makes it read everything again.

    Each rank's log lists its steps in order, so the logs are read side by side, a block at a time,
    and a step's numbers are made as soon as every log has passed it: what is held is a step's records,
    not every step's, however long the run. A log whose steps go back
    (a hand-edited or merged file) is read whole instead, with the same numbers."""
    folder = step_folder(root)
    if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
        state = None
    old_files = dict(state["files"]) if state else {}
    files = sorted(folder.glob(f"*{ROTATED}")) + sorted(folder.glob(f"*{SUFFIX}")) if folder.is_dir() else []
    logs: list[_Log] = []
    listed: list[_Log | str] = []  # each log, or why it could not be read, as listed
    for path in files:
        try:
            st = path.stat()
        except OSError as e:
            listed.append(f"{path}: {e.strerror or e}")
            continue
        before = old_files.pop(path.name, None)
        start = 0
        if before is not None:
            if before[0] != st.st_ino or st.st_size < before[1]:
                return measured_incrementally(root, None)  # rotated or rewritten
            start = before[1]
        first_line = (state or {}).get("lines", {}).get(path.name, 0) if before is not None else 0
        logs.append(_Log(path, st.st_ino, start, st.st_size, first_line, len(logs)))
        listed.append(logs[-1])
    if state and old_files:  # a log that was read before is gone
        return measured_incrementally(root, None)

    def kept() -> tuple[set, dict[int, dict[str, Any]]]:  # the steps read before, the newest ones' records
        return (set(state["steps"]) if state else set(),
                {int(k): v for k, v in (state["recent"].items() if state else ())})

    try:
        try:
            numbers, known, recent = _measure(_side_by_side(logs), state is not None, *kept())
        except _Unordered:
            for log in logs:
                log.again()
            every = sorted((item for log in logs for item in log.records()), key=lambda item: item[0])
            numbers, known, recent = _measure(iter(every), state is not None, *kept())
    except _ReadAgain:  # a late line of an old step: read it all again
        return measured_incrementally(root, None)
    warnings = list(state["warnings"]) if state else []
    torn: list[str] = []  # said this time, not kept: the line may be whole next time
    offsets: dict[str, list[int]] = {}
    for log in listed:
        if isinstance(log, str):
            warnings.append(log)
            continue
        warnings += log.warnings
        if log.error is not None:
            warnings.append(log.error)
            continue
        offsets[log.path.name] = [log.inode, log.end, log.lines]
        if log.torn:
            torn.append(f"{log.path}: its last line is not whole (a write cut short, or one being written): "
                        "not read yet")
    new_state = {"version": STATE_VERSION, "files": {k: v[:2] for k, v in offsets.items()},
                 "lines": {k: v[2] for k, v in offsets.items()}, "warnings": warnings, "steps": sorted(known),
                 "recent": {str(k): v for k, v in recent.items()}}
    return numbers, warnings + torn, new_state, state is None


NO_STEP = -1  # the key of records without a step: iterations before a step was named come first


def _key(step: int | None) -> int:
    return NO_STEP if step is None else step


class _Unordered(Exception):
    """A log's steps go back: it cannot be read side by side with the others."""


class _ReadAgain(Exception):
    """A new line of a step older than the newest kept ones."""


class _Log:
    """What one step log gained since ``start``: its records in order, read a block at a time; after
    reading, how far (``end``, ``lines``), whether a line is still being written (``torn``), its
    warnings and the error that stopped it."""

    def __init__(self, path: Path, inode: int, start: int, size: int, first_line: int, order: int) -> None:
        self.path, self.inode, self.start, self.size, self.first_line = path, inode, start, size, first_line
        self.order = order  # its place among the logs as they are listed (a step's ranks combine in it)
        self.again()

    def again(self) -> None:
        self.end, self.lines, self.torn = self.start, self.first_line, False
        self.warnings: list[str] = []
        self.error: str | None = None

    def records(self) -> Iterator[tuple[int, int, StepRecord]]:
        """``(step key, order, record)`` of each whole new line (``_key``: a record without a step first)."""
        try:
            with self.path.open("rb") as f:
                f.seek(self.start)
                left, carry = self.size - self.start, b""
                while left > 0:
                    block = f.read(min(left, BLOCK))
                    if not block:
                        break
                    left -= len(block)
                    pieces = (carry + block).split(b"\n")
                    carry = pieces.pop()
                    for piece in pieces:
                        self.end += len(piece) + 1
                        for line in piece.decode(errors="replace").splitlines() or [""]:
                            self.lines += 1
                            try:
                                record = StepRecord.decode(line)
                            except NotARecord:
                                self.warnings.append(f"{self.path}:{self.lines}: not a whole step record "
                                                     "(a write cut short?): skipped")
                                continue
                            yield _key(record.global_step), self.order, record
                self.torn = bool(carry.strip())
        except OSError as e:
            self.error = f"{self.path}: {e.strerror or e}"


def _side_by_side(logs: list[_Log]) -> Iterator[tuple[int, int, StepRecord]]:
    """Every log's records in step order, each rank's logs (its rotated one first) read as one."""
    by_rank: dict[str, list[_Log]] = {}
    for log in logs:
        by_rank.setdefault(log.path.name.removesuffix(".1"), []).append(log)
    return heapq.merge(*(_in_order(itertools.chain.from_iterable(log.records() for log in mine))
                         for _, mine in sorted(by_rank.items())), key=lambda item: item[0])


def _in_order(items: Iterator[tuple[int, int, StepRecord]]) -> Iterator[tuple[int, int, StepRecord]]:
    last = None
    for item in items:
        if last is not None and item[0] < last:
            raise _Unordered
        last = item[0]
        yield item


def _measure(ordered: Iterator[tuple[int, int, StepRecord]], incremental: bool, known: set,
             recent: dict[int, dict[str, Any]]
             ) -> tuple[dict[int | None, dict[str, Any]], set, dict[int, dict[str, Any]]]:
    """Each step's numbers from its records (in step order), with the kept records of a step the state
    knows (``recent``); then every step known, and the newest ``RECENT`` steps' records."""
    numbers: dict[int | None, dict[str, Any]] = {}
    for step, group in itertools.groupby(ordered, key=lambda item: item[0]):
        if incremental and step in known and step not in recent:
            raise _ReadAgain
        merged = {rank: StepRecord.from_json(r) for rank, r in recent.get(step, {}).items()}
        # a step's records combined in the order the logs are listed, as reading them one by one does
        for _, _, record in sorted(group, key=lambda item: item[1]):
            rank = record.rank
            merged[rank] = merged[rank].combine(record) if rank in merged else record
        recent[step] = {rank: r.to_json() for rank, r in merged.items()}
        numbers[None if step == NO_STEP else step] = measured_numbers(merged)
        known.add(step)
        if len(recent) > 2 * RECENT:  # steps come in order: an older one is not met again
            for old in sorted(recent)[:-RECENT]:
                del recent[old]
    return numbers, known, {k: recent[k] for k in sorted(recent)[-RECENT:]}
