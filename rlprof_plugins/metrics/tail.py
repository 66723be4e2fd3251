"""A rollout step's long tail: how full the engine ran, and how long a few requests kept it running nearly empty.

A rollout sends every prompt at once. The engine runs full batches for a
while; then the short responses end, and a few long ones keep it running with
a batch far below what it could hold until the last one ends. That stretch is
the tail: the step's time the engine spent on a few requests while the rest of
the fleet (and the trainer) waited.

Per step and rank, from the iterations the step metrics already time:

- ``peak_batch``: the largest running batch of the step;
- the tail: from the end of the last iteration whose batch was at least half of
  the peak (after it, the batch stayed below half for good) to the end of the
  step's last iteration: its length, iterations and tokens;
- ``occupancy``: the running batch at ``POINTS`` evenly spaced moments of the
  step's span (first iteration's start to last iteration's end), the curve a
  page draws.

On the engine thread it is a few comparisons and one small record per
iteration, with memory bounded whatever the step's length: the last iteration
of each batch size seen (bounded by the engine's largest batch), and at most
``2 * KEPT`` iterations for the curve (every ``stride``-th, the stride doubling
when they fill up).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

POINTS = 20  # the occupancy curve's points
KEPT = 64  # iterations kept for the curve: between KEPT and 2 * KEPT at any time


class Seen(NamedTuple):
    """Where the step stood at the end of an iteration: when, and how much had run by then."""

    end_ns: int
    iterations: int
    tokens: int


@dataclass
class TailRecord:
    """A finished step's tail on one rank, as the step log keeps it."""

    peak_batch: int
    span_ms: float  # first iteration's start to last iteration's end
    tail_ms: float  # the last iteration with at least half the peak batch's end, to the step's end
    tail_iterations: int
    tail_tokens: int
    occupancy: list[int]  # the running batch at POINTS moments, evenly spaced over the span

    def to_json(self) -> dict[str, Any]:
        return {"peak_batch": self.peak_batch, "span_ms": self.span_ms, "tail_ms": self.tail_ms,
                "tail_iterations": self.tail_iterations, "tail_tokens": self.tail_tokens,
                "occupancy": list(self.occupancy)}

    @classmethod
    def from_json(cls, data: Any) -> "TailRecord | None":
        if not isinstance(data, dict):
            return None
        try:
            return cls(peak_batch=int(data["peak_batch"]), span_ms=float(data["span_ms"]),
                       tail_ms=float(data["tail_ms"]), tail_iterations=int(data["tail_iterations"]),
                       tail_tokens=int(data["tail_tokens"]), occupancy=[int(b) for b in data["occupancy"]])
        except (KeyError, TypeError, ValueError):
            return None

    @property
    def tail_share(self) -> float:
        """The tail's share of the step's span (0 to 1)."""
        return self.tail_ms / self.span_ms if self.span_ms > 0 else 0.0


class StepTail:
    """One step's tail as it runs: ``add`` at the end of every iteration (the engine thread), ``record``
    once the step is over."""

    __slots__ = ("first_start_ns", "iterations", "tokens", "peak", "last_of_batch", "kept", "stride")

    def __init__(self) -> None:
        self.first_start_ns: int | None = None
        self.iterations = 0
        self.tokens = 0
        self.peak = 0
        # each batch size's last iteration, as the fields of a ``Seen``: the engine thread makes a plain tuple
        # (a NamedTuple costs many times as much to make), ``record`` reads them as ``Seen``
        self.last_of_batch: dict[int, tuple[int, int, int]] = {}
        self.kept: list[tuple[int, int]] = []  # (end ns, batch) of every stride-th iteration
        self.stride = 1

    def add(self, start_ns: int, end_ns: int, batch: int, tokens: int) -> None:
        if self.first_start_ns is None:
            self.first_start_ns = start_ns
        self.iterations += 1
        self.tokens += tokens
        if batch > self.peak:
            self.peak = batch
        self.last_of_batch[batch] = (end_ns, self.iterations, self.tokens)
        if self.iterations % self.stride == 0:
            kept = self.kept
            kept.append((end_ns, batch))
            if len(kept) >= 2 * KEPT:
                del kept[::2]  # every other one goes; from now on every other iteration is kept
                self.stride *= 2

    def record(self) -> TailRecord | None:
        """The step's tail (None: no iteration)."""
        if not self.iterations:
            return None
        seen = {batch: Seen(*fields) for batch, fields in self.last_of_batch.items()}
        last = max(seen.values(), key=lambda s: s.end_ns)  # the step's last iteration
        end_ns = last.end_ns
        half = self.peak / 2
        cut = max((s for b, s in seen.items() if b >= half), key=lambda s: s.end_ns)
        span_ns = max(end_ns - self.first_start_ns, 0)
        return TailRecord(peak_batch=self.peak, span_ms=round(span_ns / 1e6, 3),
                          tail_ms=round(max(end_ns - cut.end_ns, 0) / 1e6, 3),
                          tail_iterations=self.iterations - cut.iterations, tail_tokens=self.tokens - cut.tokens,
                          occupancy=self._curve(span_ns, last))

    def _curve(self, span_ns: int, last: Seen) -> list[int]:
        """The running batch at POINTS moments: at each, the first kept iteration that ended at or after it
        (the newest where none did)."""
        kept = self.kept or [(last.end_ns, self.peak)]
        out, k = [], 0
        for i in range(POINTS):
            moment = self.first_start_ns + span_ns * (i + 0.5) / POINTS
            while k < len(kept) - 1 and kept[k][0] < moment:
                k += 1
            out.append(kept[k][1])
        return out


def longest_tail(rollout: dict[str, dict[str, Any]] | None) -> dict[str, Any] | None:
    """A step's tail as the report shows it: of its ranks' tails (``measured_numbers``' ``rollout``), the longest,
    with the rank that had it (the rank the step waited on longest). None: no rank said its batches."""
    if not rollout:
        return None
    rank, tail = max(sorted(rollout.items()), key=lambda item: item[1]["tail_ms"])
    return {"rank": rank, "tail_ms": tail["tail_ms"], "share_pct": round(100.0 * tail["tail_share"], 1),
            "peak_batch": tail["peak_batch"], "tail_iterations": tail["tail_iterations"],
            "occupancy": tail["occupancy"]}
