"""When a chunked recording's running chunk ends (``chunk_iterations``).

torch's stop post-processes every event the chunk recorded, on the engine
thread, and Kineto's writer saves it there too (``backends.torch_profiler``);
the engine waits for both. So a chunk ends where that costs the engine the
least, on every device alike:

- when the engine is about to wait for work (``Recording.park``, from the
  engine's idle hooks): no work waits for the stop, and no chunk records the
  engine's wait loop (with Python stacks on, about two million events a
  second: vLLM's worker spins on ``sched_yield`` after each message, SGLang's
  scheduler busy-polls);
- when the process has grown by ``max_recording_mb`` since the chunk began:
  the one forced rotation, marked in the trace with its cause (``memory budget``);
- at the window's end or the stop.

``auto`` (the default) records each busy stretch as one chunk: an RL rollout,
whose prompts all arrive at once and whose engine never waits until the last
response ends, is post-processed once, after it. One case differs: a session
that began while the engine had work and has not seen it wait (``streaming``:
async RL, continuous serving) may never see it wait, so its chunks end once
their predicted pause reaches ``HEADROOM`` (half) of ``max_pause_ms``: each
pause stays short, though together they cost what one stop would. Each rank
learns what a stop costs from its own pauses (``StopCosts``: per recorded
iteration and per recorded idle second, every stop teaches it, per kind of
recording), with ``PRIOR_SECONDS`` before it has measured anything.

A fixed count N ends a chunk after every N iterations; 0 records the window
as one torch session (no chunks, no budget).
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
# A chunked session reads the process's resident memory once every this many iterations to hold it to
# ``max_recording_mb``: a read of /proc costs microseconds, an iteration milliseconds.
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
    """What makes one backend's stop cost differ from another's: the torch settings that add records."""
    s = getattr(backend, "settings", None)
    return (bool(getattr(s, "with_stack", False)), bool(getattr(s, "record_shapes", False)),
            bool(getattr(s, "with_memory", False)), tuple(getattr(s, "activities", ())))


def _stacks(kind: tuple) -> bool:
    return bool(kind[0]) if kind else False


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
    how much a chunk may grow the process by (None: no limit); ``streaming``: the session began while the
    engine had work and has not seen it wait (``AUTO`` then sizes chunks by their pause)."""

    def __init__(self, iterations: int | str, max_pause_ms: int, costs: StopCosts, kind: tuple,
                 max_recording_mb: int | None = None, *, streaming: bool = False) -> None:
        self._fixed = None if iterations == AUTO else int(iterations)
        self._target = max_pause_ms / 1000 * HEADROOM
        # ``AUTO`` on a streaming engine: each chunk sized by its predicted pause
        self.paced = self._fixed is None and streaming
        self._budget = None if max_recording_mb is None else max_recording_mb << 20
        self._costs, self._kind = costs, kind
        self._last: int | None = None  # the last chunk's length (paced)
        # asked at every iteration's end: worked out only when a pause teaches something
        self._length, self._rates = self._measure()

    @property
    def rule(self) -> str:
        """How this recording's chunks end, as the status and manifest say it: ``idle`` (at the engine's waits
        and the budget), ``pause`` (sized by ``max_pause_ms`` as well), ``count`` (every N iterations) or
        ``none`` (one torch session)."""
        if not self.chunked:
            return "none"
        return "count" if self._fixed is not None else "pause" if self.paced else "idle"

    @property
    def chunked(self) -> bool:
        """Whether the recording is cut into chunks at all (``chunk_iterations`` 0: one torch session)."""
        return self._fixed != 0

    def length(self) -> int | None:
        """Iterations a chunk with no idle time may hold; None: no length (it ends at the engine's waits, its
        budget, the window's end)."""
        return self._length

    def due(self, held: int, idle_seconds: float = 0.0) -> bool:
        """Whether a chunk holding ``held`` iterations and ``idle_seconds`` between them ends now (a rotation
        on the engine thread)."""
        if self._length is None:
            return False
        if held >= self._length:
            return True
        return self.paced and self.predicted(held, idle_seconds) >= self._target

    def over_budget(self, chunk: "RunningChunk") -> bool:
        """Whether a chunk has grown the process by its budget (read every ``BUDGET_CHECK_EVERY`` iterations;
        the first read is the chunk's starting point)."""
        if not self.chunked or self._budget is None or chunk.held % BUDGET_CHECK_EVERY != 1:
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
        if not self.paced:
            return None, rates
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
