"""Progress lines for the trace tools and their worker processes: at most one a second per input.

Users wait on these tools over traces of tens of GB; a line each second says
how far one input is (by its bytes read, compressed for gzip, against its
size on disk), without flooding a log for small inputs.
"""

from __future__ import annotations

import sys
import time
from typing import Callable

Progress = Callable[[str], None]
EVERY_S = 1.0


def to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Ticker:
    """``update(done)`` reports ``what``'s share done when a second has passed."""

    def __init__(self, progress: Progress | None, what: str, total_bytes: int, every_s: float | None = None) -> None:
        self._progress = progress
        self._what = what
        self._total = max(total_bytes, 1)
        self._every = EVERY_S if every_s is None else every_s
        self._next = time.monotonic() + self._every

    def update(self, done_bytes: int) -> None:
        if self._progress is None:
            return
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self._every
        share = min(100.0, 100.0 * done_bytes / self._total)
        self._progress(f"  {self._what}: {share:.0f}% of {self._total / 1e6:,.0f} MB")
