"""Profiler backends: how to record. They know nothing of windows or steps.

A backend is created per session and used in this order: ``start()``,
any number of ``annotation(name)`` ranges, ``stop()``, ``export(dir, name)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import ContextManager, Protocol


class Backend(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...

    def export(self, directory: Path, worker_name: str) -> list[Path]:
        """Write the recorded data under ``directory``; return the final paths."""
        ...

    def annotation(self, name: str) -> ContextManager[object]:
        """A named range visible in the trace (one per recorded iteration)."""
        ...
