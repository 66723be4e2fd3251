"""Profiler backends: how to record. They know nothing of windows or steps.

A backend is created per session and used in this order: ``prepare(dir,
name, scratch)`` (the folder its rank traces go to, where backends that write
while recording, like torch_npu's, stage; ``scratch``, the session's folder,
for what a backend keeps between its stop and its export), ``start()``,
any number of ``annotation(name)`` ranges, ``stop()`` (on the thread that
recorded), ``export(place, name)`` (on any thread; rlprof runs it off the
engine loop; ``place`` is the session's ``layout.Placement``: whole traces
in ``place.ranks()``, stage traces in ``place.ranks(stage)``).

May import: `store`, `trace` and the base modules.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ContextManager, Protocol, Sequence

if TYPE_CHECKING:
    from ..store.layout import Placement
    from ..trace.format.pauses import Pause


@dataclass(frozen=True)
class ExportedFile:
    path: Path
    kind: str = "trace"  # "trace", "table" or "npu_profile" (a torch_npu *_ascend_pt directory)
    stage: str | None = None  # "prefill"/"decode" for by-stage traces

    def describe(self, directory: Path, rank: str, role: str) -> dict:
        """The manifest entry for this file."""
        return {
            "path": str(self.path.relative_to(directory)),
            "rank": rank,
            "role": role,
            "kind": self.kind,
            "stage": self.stage or "all",
            "bytes": size_of(self.path),
        }


class RecordingKept(RuntimeError):
    """An export that failed after the recording reached the disk. The
    recording stays where it is (``kept``, described in the manifest); the
    session is ``failed`` with the reason and the command that finishes the
    job later (``finish``). A failure after recording never deletes recorded data."""

    def __init__(self, reason: str, kept: list[ExportedFile], finish: str) -> None:
        super().__init__(f"{reason}; the recording is kept, finish it with: {finish}")
        self.reason = reason
        self.kept = kept
        self.finish = finish


def size_of(path: Path) -> int:
    """Bytes of a file, or of every file under a directory."""
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return path.stat().st_size


class Backend(Protocol):
    def prepare(self, directory: Path, worker_name: str, scratch: Path | None = None) -> None: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def export(self, place: "Placement", worker_name: str, *, by_stage: bool = False,
               pauses: Sequence["Pause"] = ()) -> list[ExportedFile]:
        """Write the recorded data where ``place`` says; return the final files.
        ``pauses``: the stops the profiler made the engine wait for, to mark in the trace."""
        ...

    def annotation(self, name: str) -> ContextManager[object]:
        """A named range visible in the trace (one per recorded iteration)."""
        ...
