"""Always-on step metrics: every engine iteration timed into the open RL step's aggregates.

Tracing every step costs too much; timing every iteration does not: two
clock reads and a few additions on the engine thread, no allocation, no I/O.
Per rank and per RL global step it keeps, for each stage (the rule of
``rlprof_plugins.stages``): the iterations, their summed, largest and bucketed times
(``record.BUCKETS_MS``, the boundaries of a Prometheus histogram, so p50 and p90
come from the buckets and ranks and restarts combine exactly), the prompt and
generated tokens and the batch sizes; and the rank's busy time (inside
iterations) and idle time (between them). When the step changes (a new
weight version, a start naming ``global_step``, ``mark_step``) the finished
step goes to the ``sink`` as one ``record.StepRecord`` (``log.StepLog`` writes it
off the engine thread). The RL phases the rank runs meanwhile (``phases``) are
kept in the step open when they start.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from typing import Any, Callable

from ..stages import DECODE, PREFILL, IterationInfo
from .phases import MAX_PER_STEP, PhaseRecord
from .record import BUCKETS_MS, StageRecord, StepRecord
from .tail import StepTail

_BOUNDS_NS = tuple(b * 1e6 for b in BUCKETS_MS[:-1])
UNKNOWN = "all"  # an iteration whose stage the engine did not say


class StageTimes:
    """One stage's iterations of one step on one rank (``StepMetrics.end`` adds to it, inline)."""

    __slots__ = ("iterations", "total_ns", "max_ns", "prefill_tokens", "decode_tokens", "batch", "counts")

    def __init__(self) -> None:
        self.iterations = 0
        self.total_ns = self.max_ns = 0
        self.prefill_tokens = self.decode_tokens = self.batch = 0
        self.counts = [0] * len(BUCKETS_MS)

    def record(self) -> StageRecord:
        return StageRecord(iterations=self.iterations, total_ms=round(self.total_ns / 1e6, 3),
                           max_ms=round(self.max_ns / 1e6, 3), prefill_tokens=self.prefill_tokens,
                           decode_tokens=self.decode_tokens, batch_sum=self.batch, counts=list(self.counts))


class StepMetrics:
    """A rank's open step: ``begin``/``end`` around each engine iteration on the engine thread,
    ``set_step`` when the RL step changes. The sink gets each finished step's record."""

    def __init__(self, rank: str, sink: Callable[[StepRecord], None], clock: Callable[[], int] = time.perf_counter_ns,
                 wall: Callable[[], float] = time.time, on_step: Callable[[Any], None] | None = None) -> None:
        self.rank, self._sink, self._clock, self._wall = rank, sink, clock, wall
        self._on_step = on_step  # told each new step (the state the /metrics series read)
        self.step: int | None = None
        self.source: str | None = None
        self._reset()

    def _reset(self) -> None:
        self._stages: dict[str, StageTimes] = {}
        self._tail = StepTail()  # how full the engine ran, and the step's long tail
        self._busy_ns = self._idle_ns = 0
        self._started: int | None = None
        self._last_end: int | None = None
        self._first_wall: float | None = None
        self._phases: list[PhaseRecord] = []
        self._phases_dropped = 0

    def begin(self) -> None:
        now = self._clock()
        if self._last_end is not None:
            self._idle_ns += now - self._last_end
        elif self._first_wall is None:
            self._first_wall = self._wall()
        self._started = now

    def end(self, info: IterationInfo | None) -> None:
        started = self._started
        if started is None:
            return
        now = self._clock()
        ns = now - started
        self._started, self._last_end = None, now
        self._busy_ns += ns
        if info is None:
            stage, prefill, decode, batch = UNKNOWN, 0, 0, 0
        else:
            prefill, decode, batch = info
            stage = PREFILL if prefill > 0 else DECODE  # rlprof_plugins.stages' rule, without the property call
        times = self._stages.get(stage)
        if times is None:
            times = self._stages[stage] = StageTimes()
        # StageTimes.add, inlined: this runs on the engine thread every iteration
        times.iterations += 1
        times.total_ns += ns
        if ns > times.max_ns:
            times.max_ns = ns
        times.counts[bisect_left(_BOUNDS_NS, ns)] += 1
        times.prefill_tokens += prefill
        times.decode_tokens += decode
        times.batch += batch
        if info is not None:
            self._tail.add(started, now, batch, prefill + decode)

    def phase(self, record: PhaseRecord) -> None:
        """An RL phase that ran on this rank, kept in the open step; one that ran inside a phase kept before
        (a cache reset a weight update did itself) is dropped in favour of it."""
        inner = [p for p in self._phases if record.holds(p)]
        if inner:
            self._phases = [p for p in self._phases if p not in inner]
        if len(self._phases) < MAX_PER_STEP:
            self._phases.append(record)
        else:
            self._phases_dropped += 1

    def set_step(self, step: int | None, source: str) -> None:
        """The RL step from now on; the one before is finished (if it ran any iteration)."""
        if step == self.step:
            return
        self.flush()
        self.step, self.source = step, source
        if self._on_step is not None:
            self._on_step(step)

    def flush(self) -> None:
        """Hand the open step's record to the sink and start it afresh (a step with no iteration and no phase:
        nothing)."""
        if not self._stages and not self._phases and not self._phases_dropped:
            return
        wall = self._wall()
        if self._first_wall is None and self._phases:  # a step of phases alone starts with its first
            self._first_wall = self._phases[0].started_at
        # the last iteration's end on the wall clock: the step's numbers were timed on the engine's own clock
        last = None if self._last_end is None else round(wall - (self._clock() - self._last_end) / 1e9, 3)
        record = StepRecord(global_step=self.step, step_source=self.source, rank=self.rank,
                            started_at=round(self._first_wall or wall, 3), ended_at=round(wall, 3),
                            last_iteration_at=last,
                            iterations=sum(t.iterations for t in self._stages.values()),
                            busy_ms=round(self._busy_ns / 1e6, 3), idle_ms=round(self._idle_ns / 1e6, 3),
                            stages={stage: t.record() for stage, t in sorted(self._stages.items())},
                            tail=self._tail.record(), phases=self._phases, phases_dropped=self._phases_dropped)
        self._reset()
        self._sink(record)
