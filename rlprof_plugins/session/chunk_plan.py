"""When a chunked recording's running chunk ends (``chunk_iterations``).

torch's stop post-processes what the chunk recorded on the engine thread, in
proportion to it (docs/performance.md: ~12 ms per recorded vLLM iteration with
Python stacks, ~2 ms without, on the 2-core bench machine), and the engine
waits for it. A fixed count N ends a chunk after every N iterations. ``auto``
(the default) sizes chunks by that cost instead: each rank remembers what its
stops cost per recorded iteration (``StopCosts``: every pause teaches it,
rotations and final stops, across sessions, per kind of recording) and ends
the chunk once the pause it would cost reaches ``max_pause_ms``. A session
whose final stop stays under the target never rotates. Before a rank has
measured anything, ``PRIOR_SECONDS`` stands in (the bench machine's cost).
"""

from __future__ import annotations

import collections
import math
from typing import Any, Hashable

from ..config.options import CHUNK_AUTO as AUTO

# torch's stop per recorded iteration before a rank has measured one, stacks on/off (seconds).
PRIOR_SECONDS = {True: 0.012, False: 0.002}
REMEMBERED = 8  # pauses per kind of recording the estimate is drawn from
MAX_GROWTH = 2  # a chunk at most this times the last: torch's stop grows faster than linearly with long chunks


def recording_kind(backend: Any) -> tuple:
    """What makes one backend's stop cost differ from another's: the torch settings that add records."""
    s = getattr(backend, "settings", None)
    return (bool(getattr(s, "with_stack", False)), bool(getattr(s, "record_shapes", False)),
            bool(getattr(s, "with_memory", False)), tuple(getattr(s, "activities", ())))


class StopCosts:
    """One rank's measured pauses: seconds per recorded iteration, by kind of recording."""

    def __init__(self) -> None:
        self._seen: dict[Hashable, collections.deque[tuple[float, int]]] = {}

    def learn(self, kind: tuple, seconds: float, iterations: int) -> None:
        if iterations > 0:
            self._seen.setdefault(kind, collections.deque(maxlen=REMEMBERED)).append((seconds, iterations))

    def per_iteration(self, kind: tuple) -> float:
        """Iteration-weighted: a stop that held one iteration and much idle
        recording between (a stop request's) does not outweigh whole chunks."""
        seen = self._seen.get(kind)
        if not seen:
            return PRIOR_SECONDS[kind[0] if kind else False]
        return sum(s for s, _ in seen) / sum(n for _, n in seen)


class ChunkPlan:
    """One recording's rule: ``iterations`` a count (0: one torch session) or ``AUTO``."""

    def __init__(self, iterations: int | str, max_pause_ms: int, costs: StopCosts, kind: tuple) -> None:
        self._fixed = None if iterations == AUTO else int(iterations)
        self._target = max_pause_ms / 1000
        self._costs, self._kind = costs, kind
        self._last: int | None = None  # the last chunk's length (auto)
        # asked at every iteration's end: worked out only when a pause teaches something
        self._length = self._measure()

    def length(self) -> int | None:
        """Iterations the running chunk may hold; None: no end (one torch session)."""
        return self._length

    def due(self, held: int) -> bool:
        return self._length is not None and held >= self._length

    def learn(self, seconds: float, iterations: int, *, rotated: bool) -> None:
        """A pause of ``seconds`` for a chunk of ``iterations`` (``rotated``: mid-session)."""
        self._costs.learn(self._kind, seconds, iterations)
        if rotated:
            self._last = iterations
        self._length = self._measure()

    def _measure(self) -> int | None:
        if self._fixed is not None:
            return self._fixed or None
        n = max(1, math.floor(self._target / max(self._costs.per_iteration(self._kind), 1e-6)))
        return n if self._last is None else min(n, self._last * MAX_GROWTH)
