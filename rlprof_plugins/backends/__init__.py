"""Profiler backends: how to record. They know nothing of windows or steps.

A backend is created per session and used in this order: ``start()``,
any number of ``annotation(name)`` ranges, ``stop()`` (on the thread that
recorded), ``export(dir, name)`` (on any thread; rlprof runs it off the
engine loop).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ContextManager, Protocol


@dataclass(frozen=True)
class ExportedFile:
    path: Path
    kind: str = "trace"  # "trace" or "table"
    stage: str | None = None  # "prefill"/"decode" for by-stage traces

    def describe(self, directory: Path, rank: str, role: str) -> dict:
        """The manifest entry for this file."""
        return {
            "path": str(self.path.relative_to(directory)),
            "rank": rank,
            "role": role,
            "kind": self.kind,
            "stage": self.stage or "all",
            "bytes": self.path.stat().st_size,
        }


class Backend(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...

    def export(self, directory: Path, worker_name: str, *, by_stage: bool = False) -> list[ExportedFile]:
        """Write the recorded data under ``directory``; return the final files."""
        ...

    def annotation(self, name: str) -> ContextManager[object]:
        """A named range visible in the trace (one per recorded iteration)."""
        ...
