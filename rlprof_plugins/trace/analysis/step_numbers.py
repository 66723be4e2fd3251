"""The one definition of a step's numbers: ``rlprof summary``, ``rlprof report``, its JSON and CSV all read these.

- **An iteration's stage** is what its own name says (rlprof's ``[prefill]``/
  ``[decode]``, vLLM's context/generation counts, SGLang's ``EXTEND``/
  ``DECODE``), else the stage of the by-stage file it sits in, else ``all``
  (``stage_label``). A step recorded without by-stage files still shows
  prefill apart from decode when its iterations say which they were.
- **An iteration's time** is its slowest rank's: the engine waits for every
  rank of a tensor-parallel group, so that is the time the step paid.
- **A stage's time**: its iterations' count, total, mean and nearest-rank
  p90; its share of the step's iteration time.
- **A change** between steps is a change **per iteration**: of a stage's mean
  iteration time, of the step's mean, of an operator's time per iteration of
  its stage. Totals grow with the window recorded (5 iterations against 3
  read as +67% of everything), so they are shown beside, never compared.
- **Imbalance**: the slowest rank's summed iteration time over the fastest
  rank's; the **straggler** is the rank slowest in most iterations.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Iterable, NamedTuple

ALL = "all"  # iterations whose stage nothing says
BETWEEN = "between"  # operators outside every iteration (the engine waiting, scheduling, the idle loop)
KINDS = ("device", "cpu")


def stage_label(annotated: str | None, file_stage: str | None) -> str:
    return annotated or file_stage or ALL


class Iteration(NamedTuple):
    key: tuple  # the same iteration on every rank
    stage: str
    us: float  # its slowest rank's
    prefill_tokens: int | None
    decode_tokens: int | None
    batch: int | None
    rank: str  # the slowest


def slowest_iterations(stats: Iterable[Any]) -> list[Iteration]:
    """Each iteration once, with its slowest rank's time, in order."""
    slowest: dict[tuple, Iteration] = {}
    for st in stats:
        for key, stage, us, prefill, decode, batch in st.iteration_list:
            key = tuple(key)
            if key not in slowest or us > slowest[key].us:
                slowest[key] = Iteration(key, stage, us, prefill, decode, batch, st.rank)
    return [slowest[k] for k in sorted(slowest)]


def timeline(iterations: list[Iteration]) -> list[list]:
    """The iteration timeline the report draws: ``[index, stage, ms of its slowest rank, batch, that rank]`` each."""
    return [[it.key[1], it.stage, round(it.us / 1000.0, 3), it.batch, it.rank] for it in iterations]


def stage_numbers(iterations: list[Iteration], stats: Iterable[Any] = ()) -> dict[str, dict[str, Any]]:
    """``{stage: {iterations, total_ms, mean_ms, p90_ms, share_pct, prefill_tokens, decode_tokens,
    mean_batch, imbalance}}``; ``imbalance`` from each rank's own iterations of the stage (``stats``)."""
    by_stage: dict[str, list[Iteration]] = defaultdict(list)
    for it in iterations:
        by_stage[it.stage].append(it)
    total_us = sum(it.us for it in iterations)
    busy: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))  # stage -> rank -> us
    for st in stats:
        for _, stage, us, *_ in st.iteration_list:
            busy[stage][st.rank] += us
    out = {}
    for stage, items in sorted(by_stage.items()):
        ms = sorted(it.us / 1000.0 for it in items)
        batches = [it.batch for it in items if it.batch is not None]
        out[stage] = {
            "iterations": len(items), "total_ms": round(sum(ms), 3), "mean_ms": round(sum(ms) / len(ms), 3),
            "p90_ms": round(ms[max(0, math.ceil(0.9 * len(ms)) - 1)], 3),
            "share_pct": round(100.0 * sum(it.us for it in items) / total_us, 1) if total_us else None,
            "prefill_tokens": sum(it.prefill_tokens or 0 for it in items),
            "decode_tokens": sum(it.decode_tokens or 0 for it in items),
            "mean_batch": round(sum(batches) / len(batches), 2) if batches else None,
            "imbalance": imbalance(busy.get(stage, {})),
        }
    return out


def imbalance(busy_by_rank: dict[str, float]) -> float | None:
    """The slowest rank's busy time over the fastest's (None with fewer than two ranks)."""
    values = list(busy_by_rank.values())
    if len(values) < 2 or min(values) <= 0:
        return None
    return round(max(values) / min(values), 3)


def straggler(iterations: list[Iteration]) -> dict[str, Any] | None:
    """The rank slowest in most iterations, and in what share of them."""
    if not iterations:
        return None
    counts: dict[str, int] = defaultdict(int)
    for it in iterations:
        counts[it.rank] += 1
    rank, count = max(sorted(counts.items()), key=lambda kv: kv[1])
    return {"rank": rank, "share_pct": round(100.0 * count / len(iterations), 1)}


def change_pct(before: float | None, now: float | None) -> float | None:
    return round(100.0 * (now - before) / before, 1) if before and now is not None else None


def stage_operators(stats: Iterable[Any]) -> dict[str, dict[str, dict[str, float]]]:
    """``{stage or BETWEEN: {"device"|"cpu": {name: ms}}}`` summed over ranks (CPU: self time)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for st in stats:
        for stage, kinds in st.stage_ops.items():
            into = out.setdefault(stage, {kind: defaultdict(float) for kind in KINDS})
            for kind in KINDS:
                for name, us in kinds.get(kind, {}).items():
                    into[kind][name] += us / 1000.0
    return {stage: {kind: {n: round(ms, 3) for n, ms in ops.items()} for kind, ops in kinds.items()}
            for stage, kinds in out.items()}


def operator_changes(now: dict, now_iterations: dict[str, int], before: dict | None,
                     before_iterations: dict[str, int] | None, n: int, gone: int = 5) -> dict[str, list[dict]]:
    """Per kind, the ``n`` busiest operators per iteration of their stage, each against ``before``:
    ``{name, stage, ms and before_ms (totals), iterations, per_iteration_ms, before_iterations,
    before_per_iteration_ms, change_pct, status}``; ``status`` is ``new`` (the stage ran before, this
    operator did not), ``stage new`` (the step compared with did not run the stage at all), ``gone`` (up
    to ``gone`` of the busiest before, absent now) or ``stage gone`` (their stage did not run now), so no
    change is left blank without a reason. Operators outside every iteration count in totals only
    (``per_iteration_ms`` None)."""
    compared = before is not None
    before, before_iterations = before or {}, before_iterations or {}
    out = {}
    for kind in KINDS:
        rows = []
        for stage, kinds in now.items():
            count, earlier, count_before = now_iterations.get(stage), before.get(stage, {}).get(kind), \
                before_iterations.get(stage)
            for name, ms in kinds.get(kind, {}).items():
                rows.append(_row(name, stage, ms, count, (earlier or {}).get(name), count_before,
                                 _status(name, stage, earlier, count_before, compared)))
        rows.sort(key=lambda r: (-(r["per_iteration_ms"] if r["per_iteration_ms"] is not None else -1), -r["ms"],
                                 r["stage"], r["name"]))
        shown = rows[:n]
        vanished = [_row(name, stage, 0.0, now_iterations.get(stage), ms, before_iterations.get(stage),
                         "gone" if now_iterations.get(stage) else "stage gone")
                    for stage, kinds in before.items() if stage != BETWEEN and before_iterations.get(stage)
                    for name, ms in kinds.get(kind, {}).items() if name not in now.get(stage, {}).get(kind, {})]
        vanished.sort(key=lambda r: (-(r["before_per_iteration_ms"] or 0.0), r["name"]))
        out[kind] = shown + vanished[:gone]
    return out


def _status(name: str, stage: str, earlier: dict | None, count_before: int | None, compared: bool) -> str | None:
    if not compared or stage == BETWEEN:
        return None
    if not count_before:
        return "stage new"
    return "new" if earlier is not None and name not in earlier else None


def _row(name: str, stage: str, ms: float, count: int | None, before_ms: float | None, count_before: int | None,
         status: str | None) -> dict[str, Any]:
    per = round(ms / count, 4) if count and stage != BETWEEN else None
    per_before = round(before_ms / count_before, 4) if before_ms is not None and count_before and \
        stage != BETWEEN else None
    return {"name": name, "stage": stage, "ms": ms, "before_ms": before_ms,
            "iterations": count if stage != BETWEEN else None,
            "per_iteration_ms": per, "before_iterations": count_before if stage != BETWEEN else None,
            "before_per_iteration_ms": per_before,
            "change_pct": -100.0 if status in ("gone", "stage gone") else change_pct(per_before, per), "status": status}
