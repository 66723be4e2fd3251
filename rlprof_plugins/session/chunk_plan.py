"""When a chunked recording's running chunk ends (``chunk_iterations``).

torch's stop post-processes every event the chunk recorded, on the engine
thread, and the engine waits for it. Events come from iterations and from
the time between them: with Python stacks on, an engine waiting for work
records its own wait loop (vLLM's worker spins on ``sched_yield`` for a
second after each message, SGLang's scheduler busy-polls), about two
million events a second (docs/performance.md). So a chunk is priced by both:

    pause ≈ per_iteration × iterations held + per_idle_second × idle seconds held

A fixed count N ends a chunk after every N iterations. ``auto`` (the
default) depends on where the stop runs:

- where the stop leaves the engine thread (``backends.detached_stop``), a
  stop costs the engine a moment whatever the chunk holds, while a rotation
  mid-traffic would stop torch on the engine thread. So one torch session
  records the whole window, and its only limit is memory: once the process
  has grown by ``max_recording_mb`` since the chunk began, the chunk ends
  off the engine thread (``Recording.park`` with the budget as its cause)
  and the next one starts once that stop is done. The engine never waits
  for it; the iterations in between are not recorded, and the trace marks
  the gap.
- elsewhere (a GPU recording, exact stacks), a chunk ends once the predicted
  pause reaches ``HEADROOM`` (half) of ``max_pause_ms``. Each rank learns
  both rates from its own pauses (``StopCosts``: every stop teaches it,
  rotations and final stops, across sessions, per kind of recording), with
  ``PRIOR_SECONDS`` before it has measured anything.

Either way the engine's idle hooks end a chunk when the engine is about to
wait (``Recording.park``), so an idle wait never grows one.
"""

from __future__ import annotations

import collections
import math
import os
import time
from typing import Any, Hashable

from ..config.options import CHUNK_AUTO as AUTO

# torch's stop per recorded iteration before a rank has measured one, stacks on/off (seconds).
PRIOR_SECONDS = {True: 0.012, False: 0.002}
# ... and per second of recording between iterations (stacks on: the wait loop's ~2 M events a second).
PRIOR_IDLE_SECONDS = {True: 10.0, False: 0.05}
REMEMBERED = 8  # pauses per kind of recording the estimate is drawn from
MIN_IDLE_LESSON_S = 0.25  # the least idle time a stop holding no iteration must have recorded to teach (``learn``)
# Chunks are planned to this share of ``max_pause_ms``: one stop's cost per iteration varies severalfold
# within one session on a busy host, with the batch's shape and what else runs (a chunk being written,
# the API server's own stop).
HEADROOM = 0.5
MAX_GROWTH = 2  # a chunk at most this times the last: torch's stop grows faster than linearly with long chunks
# A session whose stop leaves the engine thread reads the process's resident memory once every this many
# iterations to hold it to ``max_recording_mb``: a read of /proc costs microseconds, an iteration milliseconds.
BUDGET_CHECK_EVERY = 16
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_bytes() -> int | None:
    """The process's resident memory (Linux's /proc/self/statm), None where it cannot be read."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def recording_kind(backend: Any) -> tuple:
    """What makes one backend's stop cost differ from another's: the torch settings that add records,
    and whether the stop leaves the engine thread (``backends.detached_stop``: only its rotations, which
    stop in place, teach its costs then)."""
    s = getattr(backend, "settings", None)
    return (bool(getattr(s, "with_stack", False)), bool(getattr(s, "record_shapes", False)),
            bool(getattr(s, "with_memory", False)), tuple(getattr(s, "activities", ())),
            bool(getattr(backend, "detachable", False)))


def _stacks(kind: tuple) -> bool:
    return bool(kind[0]) if kind else False


def _detachable(kind: tuple) -> bool:
    return bool(kind[4]) if len(kind) > 4 else False



class StopCosts:
    """One rank's measured pauses, by kind of recording: what a recorded
    iteration and a recorded idle second each add to a stop."""

    def __init__(self) -> None:
        self._seen: dict[Hashable, collections.deque[tuple[float, int, float]]] = {}

    def learn(self, kind: tuple, seconds: float, iterations: int, idle_seconds: float = 0.0) -> None:
        """A stop of ``seconds`` for what its chunk held. One that held no iteration teaches only where
        it recorded the engine waiting for ``MIN_IDLE_LESSON_S`` or more: a stop's fixed cost over a few
        milliseconds is no price of an idle second (a session started on an idle engine parks its first
        chunk at once; read as one, it cut the next chunks to a few iterations)."""
        if iterations > 0 or idle_seconds >= MIN_IDLE_LESSON_S:
            self._seen.setdefault(kind, collections.deque(maxlen=REMEMBERED)).append(
                (seconds, iterations, max(idle_seconds, 0.0)))

    def rates(self, kind: tuple) -> tuple[float, float]:
        """(seconds per iteration, seconds per idle second): non-negative least
        squares over the remembered pauses; a rate they cannot tell apart keeps its prior."""
        prior = (PRIOR_SECONDS[_stacks(kind)], PRIOR_IDLE_SECONDS[_stacks(kind)])
        seen = [p for p in self._seen.get(kind, ()) if p[1] > 0] or list(self._seen.get(kind, ()))
        if not seen:
            return prior
        counted = sum(n for _, n, _ in seen)
        # iteration-weighted: a stop that held one iteration and much idle recording does not outweigh chunks
        a = sum(s for s, _, _ in seen) / counted if counted else prior[0]
        if not any(i > 0 for _, _, i in seen):
            return a, prior[1]
        s_n = sum(n * n for _, n, _ in seen)
        s_i = sum(i * i for _, _, i in seen)
        s_ni = sum(n * i for _, n, i in seen)
        y_n = sum(s * n for s, n, _ in seen)
        y_i = sum(s * i for s, _, i in seen)
        det = s_n * s_i - s_ni * s_ni
        if det > 1e-9 * s_n * s_i:
            fit_a, fit_c = (y_n * s_i - y_i * s_ni) / det, (y_i * s_n - y_n * s_ni) / det
            if fit_a >= 0 and fit_c >= 0:
                return fit_a, fit_c
        # the two cannot be told apart: iterations explain what they can, idle time the rest
        rest = [(max(s - a * n, 0.0), i) for s, n, i in seen if i > 0]
        return a, sum(r * i for r, i in rest) / sum(i * i for _, i in rest)

    def per_iteration(self, kind: tuple) -> float:
        return self.rates(kind)[0]


class ChunkPlan:
    """One recording's rule: ``iterations`` a count (0: one torch session) or ``AUTO``; ``max_recording_mb``:
    the memory an ``AUTO`` chunk whose stop leaves the engine thread may grow the process by (None: no limit)."""

    def __init__(self, iterations: int | str, max_pause_ms: int, costs: StopCosts, kind: tuple,
                 max_recording_mb: int | None = None) -> None:
        self._fixed = None if iterations == AUTO else int(iterations)
        self._target = max_pause_ms / 1000 * HEADROOM
        # ``AUTO`` where the stop leaves the engine thread: one session, held to a memory budget only
        self.memory_bound = self._fixed is None and _detachable(kind)
        self._budget = None if max_recording_mb is None else max_recording_mb << 20
        self._costs, self._kind = costs, kind
        self._last: int | None = None  # the last chunk's length (auto)
        # asked at every iteration's end: worked out only when a pause teaches something
        self._length, self._rates = self._measure()

    @property
    def chunked(self) -> bool:
        """Whether the recording is cut into chunks at all (``chunk_iterations`` 0: one torch session)."""
        return self._fixed != 0

    def length(self) -> int | None:
        """Iterations a chunk with no idle time may hold; None: no end (one torch session)."""
        return self._length

    def due(self, held: int, idle_seconds: float = 0.0) -> bool:
        """Whether a chunk holding ``held`` iterations and ``idle_seconds`` between them ends now (a rotation
        on the engine thread; never for a memory-bound session, see ``over_budget``)."""
        if self._length is None or self.memory_bound:
            return False
        if held >= self._length:
            return True
        return self._fixed is None and self.predicted(held, idle_seconds) >= self._target

    def over_budget(self, chunk: "RunningChunk") -> bool:
        """Whether a memory-bound chunk has grown the process by its budget (read every
        ``BUDGET_CHECK_EVERY`` iterations; the first read is the chunk's starting point)."""
        if not self.memory_bound or self._budget is None or chunk.held % BUDGET_CHECK_EVERY != 1:
            return False
        now = resident_bytes()
        if now is None:
            return False
        if chunk.resident_at_start is None:
            chunk.resident_at_start = now
            return False
        return now - chunk.resident_at_start >= self._budget

    def predicted(self, held: int, idle_seconds: float) -> float:
        """The stop this chunk would cost now (seconds)."""
        a, c = self._rates
        return a * held + c * idle_seconds

    def learn(self, seconds: float, iterations: int, *, rotated: bool, idle_seconds: float = 0.0) -> None:
        """A pause of ``seconds`` for a chunk of ``iterations`` and ``idle_seconds`` (``rotated``: mid-session)."""
        self._costs.learn(self._kind, seconds, iterations, idle_seconds)
        if rotated and iterations > 0:
            self._last = iterations
        self._length, self._rates = self._measure()

    def _measure(self) -> tuple[int | None, tuple[float, float]]:
        rates = self._costs.rates(self._kind)
        if self._fixed is not None:
            return self._fixed or None, rates
        n = max(1, math.floor(self._target / max(rates[0], 1e-6)))
        return (n if self._last is None else min(n, self._last * MAX_GROWTH)), rates


class RunningChunk:
    """What the running chunk holds so far: its iterations (first and last
    index) and its recorded seconds, inside iterations and between them."""

    def __init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        """A profiler started: nothing held yet."""
        self.span: tuple[int, int] | None = None
        self.resident_at_start: int | None = None  # the process's memory at its first iteration (``over_budget``)
        self._began = time.perf_counter()
        self._busy = 0.0
        self._entered: float | None = None

    def enter(self, index: int) -> None:
        self.span = (index, index) if self.span is None else (self.span[0], index)
        self._entered = time.perf_counter()

    def leave(self) -> None:
        if self._entered is not None:
            self._busy += time.perf_counter() - self._entered
            self._entered = None

    @property
    def held(self) -> int:
        return 0 if self.span is None else self.span[1] - self.span[0] + 1

    def idle_seconds(self) -> float:
        """Recorded seconds outside iterations (the engine waiting, recorded all the same)."""
        now = time.perf_counter()
        inside = self._busy + (now - self._entered if self._entered is not None else 0.0)
        return max(now - self._began - inside, 0.0)
