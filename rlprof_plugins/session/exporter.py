"""The one background thread a worker writes with, and each writer's report to the manifest.

What the engine thread stopped (chunks as they stop, whole sessions at their
end) is written here, in the order it was stopped, so no file I/O runs on
the engine thread; ``report`` keeps a step folder's manifest current.
"""

from __future__ import annotations

import threading

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from ..store import manifest
from . import finalize
from .._log import logger


class Exporter:
    """The one background thread of a worker that writes what its engine
    thread stopped (chunks, whole sessions), in the order they were stopped."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self.pending = 0  # jobs submitted and not yet done: the engine shares the host with their writing

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlprof-export")
        with self._lock:
            self.pending += 1
        self._pool.submit(self._run, fn, *args)

    def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        finally:
            with self._lock:
                self.pending -= 1

    def shutdown(self) -> None:
        """Wait for what was submitted (a worker going away)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)


def report(directory: Path, *, session_id: str, writer: str, section: dict[str, Any],
           header: dict[str, Any]) -> None:
    """Write ``writer``'s section of the step folder's manifest; the update that
    makes every expected writer terminal starts the step's completion work.
    Never raises: a manifest problem must not fail the session."""
    try:
        manifest.update(directory, session_id=session_id, writer=writer, section=section, header=header,
                        on_complete=lambda data: finalize.on_step_complete(directory, data))
    except Exception as e:
        logger.warning("rlprof: could not update %s/manifest.json: %s", directory, e)
