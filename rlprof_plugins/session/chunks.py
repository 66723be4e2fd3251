"""A recording made of consecutive torch sessions, and the one trace it ends as.

torch's own ``stop()`` post-processes every recorded event on the thread
that recorded (the engine's), seconds with Python stacks on. A session's
window may be recorded as chunks (``session.chunk_plan`` says when one
ends): the running profiler stops, its raw trace is saved and its recording
freed (``backends.torch_profiler``), and a fresh one starts, at once or with
the engine's next iteration (``Recording.park``). Each stopped chunk is
written by the exporter thread as soon as it stopped, into a hidden folder
of the session's directory (``.rlprof-chunks/``), so memory stays bounded by
one chunk, not the session. At the session's end the exporter stitches them
(``trace.rewrite.stitch``, in a child process) into the file an unchunked
session writes, split by stage when asked, and removes them.

A stitch that fails leaves the chunks where they are, listed in the manifest
with the ``rlprof stitch`` command that finishes the job.
"""

from __future__ import annotations

import time
from pathlib import Path

from ..backends import Backend, ExportedFile, RecordingKept
from ..store.layout import Placement
from ..atomic_files import atomic_target
from ..trace.format.naming import trace_file
from ..trace.format.pauses import Pause, pauses_of, write_pauses
from ..trace.rewrite.stage_split import split_in_subprocess
from ..trace.rewrite.stitch import stitch_in_subprocess

CHUNK_DIR = ".rlprof-chunks"


def chunkable(backend: Backend) -> bool:
    """Whether the backend's stop is the one worth chunking (torch.profiler's;
    torch_npu writes while it records and analyses off the engine already)."""
    return bool(getattr(backend, "chunkable", False))


class Chunks:
    """The chunks of one rank's session: written one by one, joined at the end."""

    def __init__(self, directory: Path, name: str) -> None:
        self.folder = directory / CHUNK_DIR
        self._name = name
        self.stopped: list[Backend] = []  # in recording order, until written
        self.paths: list[Path] = []
        self.error: BaseException | None = None
        self._index = 0  # the next chunk's number, in recording order

    def write_all(self) -> None:
        """Export every stopped chunk (exporter thread), releasing each
        profiler's records once written. A chunk that cannot be written is
        remembered: the session fails at the end, the others kept."""
        while self.stopped:
            backend = self.stopped.pop(0)  # its records go with it once written
            try:
                written = backend.export(Placement(self.folder, False), f"{self._name}.chunk{self._index:04d}")
                self.paths += [f.path for f in written if f.kind == "trace"]
            except Exception as e:
                self.error = self.error or e
            self._index += 1
            del backend

    def join(self, place: Placement, *, by_stage: bool, gzip: bool = True,
             pauses: list[Pause] | None = None) -> list[ExportedFile]:
        """The chunks as the trace(s) one torch session would have written,
        with the profiler's ``pauses`` marked."""
        ns = time.time_ns()
        pauses = list(pauses or [])
        final = place.ranks() / trace_file(self._name, ns, gzip=gzip)
        if self.error is not None:
            raise self._kept(f"a chunk could not be written: {type(self.error).__name__}: {self.error}", final,
                             pauses=pauses)
        try:
            if by_stage:
                raw = atomic_target(place.root / trace_file(self._name, ns, gzip=False))
                try:
                    stitch_in_subprocess(self.paths, raw, pauses)
                    written = [ExportedFile(path, "trace", stage) for stage, path in
                               split_in_subprocess(raw, place.stage_template(), f"{self._name}.{ns}", gzip)]
                finally:
                    raw.unlink(missing_ok=True)
            else:
                final.parent.mkdir(parents=True, exist_ok=True)
                stitch_in_subprocess(self.paths, final, pauses)
                written = [ExportedFile(final)]
        except Exception as e:
            raise self._kept(f"stitching {len(self.paths)} chunks failed: {type(e).__name__}: {e}", final,
                             place if by_stage else None, pauses) from e
        self._remove()
        return written

    def keep(self, place: Placement, pauses: list[Pause] | None = None) -> RecordingKept:
        """The session failed while recording: write the chunks stopped so far
        and keep them as they are."""
        self.write_all()
        return self._kept(f"{len(self.paths)} chunks recorded before it kept",
                          place.ranks() / trace_file(self._name, time.time_ns()), pauses=pauses)

    def _kept(self, reason: str, final: Path, split_to: Placement | None = None,
              pauses: list[Pause] | None = None) -> RecordingKept:
        """The chunks stay, with their pauses beside the first (``rlprof stitch`` puts them back)."""
        if self.paths and pauses:
            try:
                write_pauses(pauses_of(self.paths[0]), pauses)
            except OSError:
                pass  # the chunks matter; their pauses are a nicety
        finish = f"rlprof stitch {' '.join(str(p) for p in self.paths)} -o {final}"
        if split_to is not None:
            finish += f" && rlprof split-stages {final} -o '{split_to.stage_template()}'"
        return RecordingKept(reason, [ExportedFile(p) for p in self.paths], finish)

    def _remove(self) -> None:
        for path in self.paths:
            path.unlink(missing_ok=True)
            pauses_of(path).unlink(missing_ok=True)
        try:
            self.folder.rmdir()  # other ranks' chunks may still be there
        except OSError:
            pass
