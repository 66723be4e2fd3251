"""Writing a Chrome trace event by event, atomically, and in parts.

``TraceWriter`` writes the top-level object through a temporary file that
is renamed into place only when complete (``close``); ``abort`` (or an
exception inside ``with``) removes it. Events are encoded a batch per call
(``codec``); gzip output goes through ``gz``.

``PartWriter`` writes only events, as one part of a gzip stream, for a
process that encodes one rank of a merge; ``TraceWriter.append_part``
splices such parts in, in order, without decompressing them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...atomic_files import atomic_target, publish
from . import codec, gz
from .reader import EVENTS_KEY

BATCH = 4096  # events encoded per call when writing one at a time
SEPARATOR = b",\n"


class _Events:
    """Comma-separated events on a byte sink, batched."""

    def __init__(self, sink) -> None:
        self._sink = sink
        self._batch: list[dict] = []
        self.count = 0
        self.empty = True

    def write(self, event: dict) -> None:
        self._batch.append(event)
        if len(self._batch) >= BATCH:
            self.flush()

    def write_batch(self, events: list[dict]) -> None:
        self.flush()
        self._emit(events)

    def _emit(self, events: list[dict]) -> None:
        if not events:
            return
        text = codec.encode_events(events)
        self._sink.write(text if self.empty else SEPARATOR + text)
        self.empty = False
        self.count += len(events)

    def flush(self) -> None:
        if self._batch:
            self._emit(self._batch)
            self._batch = []


class TraceWriter:
    """Write a trace to ``final`` (gzip when it ends in .gz)."""

    def __init__(self, final: str | Path, header: dict[str, Any] | None = None, *, compresslevel: int = 3) -> None:
        self.final = Path(final)
        self._tmp = atomic_target(self.final)
        self._raw = open(self._tmp, "wb")
        self._gzip = gz.GzipWriter(self._raw, compresslevel) if self.final.suffix == ".gz" else None
        self._sink = self._gzip or self._raw
        self._events = _Events(self._sink)
        parts = [b"{"]
        for key, value in (header or {}).items():
            # the header as Kineto writes it (a space after each colon): tools find
            # the rank by that text (HolisticTraceAnalysis: '"rank":\s+(\d+)')
            parts.append(codec.encode_value(key) + b": " + codec.encode_value(value) + b",\n")
        parts.append(f'"{EVENTS_KEY}":[\n'.encode())
        self._sink.write(b"".join(parts))

    @property
    def count(self) -> int:
        return self._events.count

    def write(self, event: dict) -> None:
        self._events.write(event)

    def write_batch(self, events: list[dict]) -> None:
        self._events.write_batch(events)

    def append_part(self, part: "PartResult") -> None:
        """Events another process encoded (``PartWriter``), spliced in as they are."""
        if self._gzip is None:
            raise ValueError("parts are gzip streams: the output must end in .gz")
        self._events.flush()
        if not part.count:
            return
        if not self._events.empty:
            self._sink.write(SEPARATOR)
        self._gzip.append_part(part.path, part.crc, part.size)
        self._events.empty = False
        self._events.count += part.count

    def close(self, trailer: dict[str, Any] | None = None) -> Path:
        self._events.flush()
        tail = [b"\n]"]
        for key, value in (trailer or {}).items():
            tail.append(b",\n" + codec.encode_value(key) + b":" + codec.encode_value(value))
        tail.append(b"}\n")
        self._sink.write(b"".join(tail))
        if self._gzip is not None:
            self._gzip.close()
        self._raw.close()
        publish(self._tmp, self.final)
        return self.final

    def abort(self) -> None:
        try:
            self._raw.close()
        finally:
            self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is not None:
            self.abort()


@dataclass
class PartResult:
    """What ``PartWriter.close`` hands back to the process that splices it."""

    path: Path
    crc: int  # CRC-32 of the part's uncompressed bytes
    size: int  # their length
    count: int  # events in it


class PartWriter:
    """Events only, as a raw deflate part (``gz.DeflatePart``) in ``path``."""

    def __init__(self, path: Path, *, compresslevel: int = 3) -> None:
        self.path = Path(path)
        self._raw = open(self.path, "wb")
        self._part = gz.DeflatePart(self._raw, compresslevel)
        self._events = _Events(self._part)

    def write(self, event: dict) -> None:
        self._events.write(event)

    def write_batch(self, events: list[dict]) -> None:
        self._events.write_batch(events)

    def close(self) -> PartResult:
        self._events.flush()
        self._part.end()
        self._raw.close()
        return PartResult(self.path, self._part.crc, self._part.size, self._events.count)

    def abort(self) -> None:
        self._raw.close()
        self.path.unlink(missing_ok=True)

