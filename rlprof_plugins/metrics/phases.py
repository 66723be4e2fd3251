"""The RL phases an engine sees between generations, timed where they run: one ``PhaseRecord`` each.

Between two rollouts a trainer puts the engine through phases that are not
generation: it resets the prefix cache, pauses and resumes generation,
updates the weights, puts the engine to sleep and wakes it. Each engine
patch times its entry point for one of them (``timed``) and hands the record
to the rank's step metrics, which keep it in the step open when the phase
started (``timer.StepMetrics.phase``). Where the weight version is the step
source, the update that moves the version ends the step it belongs to: its
phases are those after the step's generation, until the next step's first
iteration.

A phase that runs inside another one (a cache reset the weight update does
itself) is part of the outer one: the step keeps only the outer record, so
the phases of a step never overlap and their times add up.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

from .._log import logger

WEIGHT_UPDATE = "weight_update"
CACHE_RESET = "cache_reset"
SLEEP = "sleep"
WAKE_UP = "wake_up"
PAUSE = "pause"
RESUME = "resume"
PHASES = (WAKE_UP, WEIGHT_UPDATE, CACHE_RESET, PAUSE, RESUME, SLEEP)  # in the order a rollout meets them

MAX_PER_STEP = 64  # records a step keeps; past it, only the totals grow (``StepRecord.phases_dropped``)


@dataclass
class PhaseRecord:
    """One phase on one rank: which (``PHASES``), the engine's entry point that ran it (``call``), when it
    started (wall seconds), how long it took, the engine's weight version when it started, and what the
    caller asked for where it matters (a sleep's level, a wake's tags, the weights' source)."""

    phase: str
    call: str
    started_at: float
    ms: float
    weight_version: str | None = None
    detail: str | None = None

    @property
    def ended_at(self) -> float:
        return self.started_at + self.ms / 1e3

    def holds(self, other: "PhaseRecord") -> bool:
        """Whether ``other`` ran inside this phase (a cache reset a weight update did itself)."""
        return self.started_at <= other.started_at and other.ended_at <= self.ended_at + 1e-6

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"phase": self.phase, "call": self.call, "started_at": round(self.started_at, 6),
                               "ms": round(self.ms, 3)}
        if self.weight_version is not None:
            out["weight_version"] = self.weight_version
        if self.detail is not None:
            out["detail"] = self.detail
        return out

    @classmethod
    def from_json(cls, data: Any) -> "PhaseRecord | None":
        """A record as written, or None for anything else (a later release's field is ignored, a broken one
        dropped: the step's other numbers stand)."""
        if not isinstance(data, dict):
            return None
        phase, call, started, ms = (data.get(k) for k in ("phase", "call", "started_at", "ms"))
        if not (isinstance(phase, str) and isinstance(call, str) and _is_number(started) and _is_number(ms)):
            return None
        version, detail = data.get("weight_version"), data.get("detail")
        return cls(phase, call, float(started), float(ms), str(version) if version is not None else None,
                   str(detail) if detail is not None else None)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def in_order(names: Any) -> list[str]:
    """``names`` in ``PHASES`` order, any other name (a later release's phase) after them, sorted."""
    present = set(names)
    return [p for p in PHASES if p in present] + sorted(present - set(PHASES))


def totals(records: list[PhaseRecord]) -> dict[str, dict[str, float]]:
    """``{phase: {"count", "ms"}}`` of one rank's records, in ``PHASES`` order."""
    out: dict[str, dict[str, float]] = {}
    for name in in_order(r.phase for r in records):
        mine = [r for r in records if r.phase == name]
        out[name] = {"count": len(mine), "ms": round(sum(r.ms for r in mine), 3)}
    return out


def longest(by_rank: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``{phase: {"ms", "count", "rank"}}`` of one step: each phase's time on the rank where it took longest (the
    ranks run a phase together; the step waited for the slowest), from ``reader.phases_of``'s answer."""
    out: dict[str, dict[str, Any]] = {}
    for rank, mine in sorted(by_rank.items()):
        for phase, t in mine.get("totals", {}).items():
            if phase not in out or t["ms"] > out[phase]["ms"]:
                out[phase] = {"ms": t["ms"], "count": t["count"], "rank": rank}
    return {phase: out[phase] for phase in in_order(out)}


def timed(phase: str, call: str, run: Callable[[], Any], deliver: Callable[[PhaseRecord], None],
          detail: str | None = None, starting: Callable[[], None] | None = None) -> Any:
    """``run()`` as the engine runs it, its result or exception unchanged; then its record to ``deliver``
    (the rank's step metrics), whatever ``run`` did. ``starting`` is told first, where the rank's step metrics
    are in this process (the flight recorder then knows the engine is not stalled while the phase runs). A
    failure to deliver is logged, never raised: the engine's call has already done its work."""
    if starting is not None:
        try:
            starting()
        except Exception as e:
            logger.warning("rlprof: the %s phase (%s) start not told: %s: %s", phase, call, type(e).__name__, e)
    started_at = time.time()
    started = time.perf_counter()
    try:
        return run()
    finally:
        record = PhaseRecord(phase, call, started_at, (time.perf_counter() - started) * 1e3, detail=detail)
        try:
            deliver(record)
        except Exception as e:
            logger.warning("rlprof: the %s phase (%s) was not recorded: %s: %s", phase, call, type(e).__name__, e)
