"""What a recording leaves on disk: its export and, after a failure, what is salvaged (exporter thread).

The other half of a ``Recording``: the engine thread records (``recording``),
the exporter thread writes. ``RecordingOutput.write_chunks`` writes each
stopped chunk as soon as it stopped; ``export`` writes the session's last
chunk (or its one recording) and joins the chunks, the window's memory
snapshot beside the traces; it never raises: what failed after recording is
reported with the files that stay. After a failure, ``salvage`` keeps the
chunks stopped before it, with the command that joins them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..backends import RecordingKept


@dataclass
class Exported:
    """What an export left on disk, described for the manifest, and how it ended."""

    files: list[dict[str, Any]] = field(default_factory=list)
    error: BaseException | None = None
    seconds: float = 0.0
    memory: dict[str, Any] | None = None  # the memory snapshot's costs and size (``memory``)


class RecordingOutput:
    """The exporter thread's side of one ``Recording``: it reads the recording's final state (its
    backend, chunks and pauses) once the engine thread has stopped it."""

    def __init__(self, recording: Any) -> None:
        self._rec = recording  # its ``Recording`` (which makes this output: no import back to it)

    def write_chunks(self) -> None:
        """Exporter thread: write the chunks stopped so far, so their events leave this process."""
        if self._rec.chunks is not None:
            self._rec.chunks.write_all()

    @property
    def keeps_data(self) -> bool:
        """After ``abandon``: what was recorded before the failure and is still to be written."""
        return self._rec.chunks is not None or (self._rec.memory is not None and self._rec.memory.taken)

    def salvage(self) -> Exported:
        """After a failure (exporter thread): the chunks stopped before it,
        written and kept as they are, with the command that joins them, and
        the memory snapshot ``abandon`` took."""
        kept = Exported()
        if self._rec.chunks is not None:
            chunks = self._rec.chunks.keep(self._rec.place, self._rec.pauses)
            kept = Exported(self._describe(chunks.kept), chunks)
        return self._with_memory(kept)

    def export(self, *, by_stage: bool = False) -> Exported:
        t0 = time.perf_counter()
        try:
            self._rec.directory.mkdir(parents=True, exist_ok=True)
            if self._rec.chunks is None:
                written = self._rec.backend.export(self._rec.place, self._rec.name, by_stage=by_stage, pauses=self._rec.pauses)
            else:  # every chunk written, then joined
                if not self._rec.parked:
                    self._rec.chunks.stopped.append(self._rec.backend)
                self._rec.chunks.write_all()
                settings = getattr(self._rec.backend, "settings", None)
                written = self._rec.chunks.join(self._rec.place, by_stage=by_stage, gzip=getattr(settings, "use_gzip", True),
                                           pauses=self._rec.pauses)
            return self._with_memory(Exported(self._describe(written), None, time.perf_counter() - t0))
        except RecordingKept as e:  # failed after recording: the data stays, listed with the reason
            return self._with_memory(Exported(self._describe(e.kept), e, time.perf_counter() - t0))
        except Exception as e:
            return self._with_memory(Exported([], e, time.perf_counter() - t0))

    def _with_memory(self, exported: Exported) -> Exported:
        """The window's memory snapshot written beside the traces, whatever became of them."""
        if self._rec.memory is None:
            return exported
        try:
            written = self._rec.memory.export(self._rec.place.memory_file(self._rec.rank, self._rec.name))
            exported.files += self._describe([written] if written else [])
        except Exception as e:
            self._rec.memory.report["error"] = f"writing the memory snapshot failed: {type(e).__name__}: {e}"
        if "error" in self._rec.memory.report and exported.error is None:
            exported.error = RuntimeError(self._rec.memory.report["error"])
        exported.memory = dict(self._rec.memory.report)
        return exported

    def _describe(self, written: list) -> list[dict[str, Any]]:
        return [f.describe(self._rec.directory, self._rec.rank, self._rec.role) for f in written]
