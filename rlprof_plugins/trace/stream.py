"""Reading and writing Chrome traces one event at a time.

Rank traces reach gigabytes (users report tens of GB per rank); loading one
whole costs several times its size in Python objects, which is how mergers
run out of memory. ``TraceReader`` decodes the top-level object key by key
and the ``traceEvents`` array one event at a time (``json`` C scanner on a
sliding text buffer), so memory is bounded by the largest single event.
``TraceWriter`` writes the same shape through a temporary file that is
renamed into place only when complete.

Any layout is accepted (Kineto's indented output, compact one-line JSON,
the bare-array form of the Trace Event Format), plain or gzip (detected by
its magic bytes, not the name).
"""

from __future__ import annotations

import gzip
import io
import json
import re
import zlib
from pathlib import Path
from typing import Any, Iterator

from ..layout import atomic_target, publish

CHUNK = 1 << 20
BATCH = 512  # events encoded per call when writing
_WS = re.compile(r"[\s,]*")
_BASE_TIME = re.compile(rb'"baseTimeNanoseconds"\s*:\s*(\d+)')
EVENTS_KEY = "traceEvents"


class TraceFormatError(ValueError):
    """The file is not a readable Chrome trace; the message names the file."""


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def open_text(path: Path):
    if is_gzip(path):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8")


class TraceReader:
    """Stream one trace file.

    ``header`` holds the top-level keys before ``traceEvents`` as soon as the
    reader is opened; ``events()`` yields the events once; ``trailer`` holds
    the keys after the array once ``events()`` is exhausted.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.header: dict[str, Any] = {}
        self.trailer: dict[str, Any] = {}
        self._decoder = json.JSONDecoder()
        try:
            self._file = open_text(self.path)
        except OSError as e:
            raise TraceFormatError(f"{self.path}: cannot open: {e.strerror or e}") from None
        self._buf = ""
        self._pos = 0
        self._eof = False
        self._array_form = False
        self._consumed = False
        try:
            self._read_header()
        except BaseException:
            self.close()
            raise

    # ---- low-level buffer -----------------------------------------------
    def _fill(self) -> bool:
        if self._eof:
            return False
        try:
            chunk = self._file.read(CHUNK)
        except (OSError, EOFError, zlib.error, UnicodeDecodeError) as e:
            raise TraceFormatError(f"{self.path}: corrupt or truncated: {e}") from None
        if not chunk:
            self._eof = True
            return False
        self._buf = self._buf[self._pos:] + chunk
        self._pos = 0
        return True

    def _skip(self) -> str:
        """Skip whitespace and commas; return the next character ('' at EOF)."""
        while True:
            self._pos = _WS.match(self._buf, self._pos).end()
            if self._pos < len(self._buf):
                return self._buf[self._pos]
            if not self._fill():
                return ""

    def _expect(self, char: str) -> None:
        if self._skip() != char:
            got = self._buf[self._pos:self._pos + 20] or "end of file"
            raise TraceFormatError(f"{self.path}: not a Chrome trace (expected {char!r}, found {got!r})")
        self._pos += 1

    def _value(self) -> Any:
        self._skip()
        while True:
            try:
                value, end = self._decoder.raw_decode(self._buf, self._pos)
            except json.JSONDecodeError as e:
                # Cut by the buffer's end: read more and retry. Anything else
                # is corrupt (and must not make us read the rest into memory).
                cut = e.pos >= len(self._buf) - 1 or e.msg.startswith("Unterminated string")
                if cut and self._fill():
                    continue
                raise TraceFormatError(f"{self.path}: corrupt or truncated JSON: {e.msg}") from None
            # A number or literal cut by the buffer's end may decode short.
            if end == len(self._buf) and not self._eof and not isinstance(value, (dict, list, str)):
                if self._fill():
                    continue
            self._pos = end
            return value

    # ---- structure ------------------------------------------------------
    def _read_header(self) -> None:
        first = self._skip()
        if first == "[":
            self._pos += 1
            self._array_form = True
            return
        self._expect("{")
        while True:
            c = self._skip()
            if c == "}":
                self._pos += 1
                self._consumed = True
                return
            key = self._value()
            if not isinstance(key, str):
                raise TraceFormatError(f"{self.path}: not a Chrome trace (bad key {key!r})")
            self._expect(":")
            if key == EVENTS_KEY:
                self._expect("[")
                return
            self.header[key] = self._value()

    def events(self) -> Iterator[dict]:
        if self._consumed:
            return
        self._consumed = True
        scan = self._decoder.scan_once  # the C scanner, without raw_decode's wrapper
        while True:
            c = self._skip()
            if c == "]":
                self._pos += 1
                break
            if c == "":
                raise TraceFormatError(f"{self.path}: truncated (traceEvents not closed)")
            try:
                event, self._pos = scan(self._buf, self._pos)
            except (StopIteration, json.JSONDecodeError):
                event = self._value()  # cut by the buffer's end (refills), or corrupt (raises)
            if not isinstance(event, dict):
                raise TraceFormatError(f"{self.path}: an event is not an object: {event!r:.80}")
            yield event
        if not self._array_form:
            self._read_trailer()

    def _read_trailer(self) -> None:
        while True:
            c = self._skip()
            if c == "}":
                self._pos += 1
                return
            if c == "":
                raise TraceFormatError(f"{self.path}: truncated (top-level object not closed)")
            key = self._value()
            self._expect(":")
            self.trailer[key] = self._value()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> "TraceReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def ts_ns(value: Any) -> int | None:
    """A ``ts`` in integer nanoseconds. torch_npu writes absolute microseconds
    as strings (``"1795366444456044.606"``) because a double cannot hold them
    to the nanosecond; they are parsed exactly here."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return int(round(value * 1000))
    if isinstance(value, str):
        whole, _, frac = value.strip().partition(".")
        try:
            sign = -1 if whole.startswith("-") else 1
            return int(whole) * 1000 + sign * int((frac + "000")[:3])
        except ValueError:
            return None
    return None


def first_ts_ns(path: Path) -> int | None:
    """The first event time of a trace (for absolute-time traces, whose
    header has no base time)."""
    with TraceReader(path) as reader:
        for e in reader.events():
            if e.get("ph") != "M" and "ts" in e:
                ns = ts_ns(e["ts"])
                if ns is not None:
                    return ns
    return None


def base_time_ns(reader: TraceReader) -> int | None:
    """Kineto's ``baseTimeNanoseconds``: in the header in recent torch; older
    Kineto wrote it after the events, so then scan the file's end (a
    decompress-only pass, no JSON parsing)."""
    if "baseTimeNanoseconds" in reader.header:
        return int(reader.header["baseTimeNanoseconds"])
    tail = b""
    opener = gzip.open if is_gzip(reader.path) else open
    try:
        with opener(reader.path, "rb") as f:
            while chunk := f.read(CHUNK):
                tail = (tail + chunk)[-4096:]
    except (OSError, EOFError, zlib.error) as e:
        raise TraceFormatError(f"{reader.path}: corrupt or truncated: {e}") from None
    found = _BASE_TIME.findall(tail)
    return int(found[-1]) if found else None


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


class TraceWriter:
    """Write a trace event by event to ``final`` (gzip when it ends in .gz),
    through a temporary file renamed into place by ``close()``; ``abort()``
    (or an exception inside ``with``) removes the temporary."""

    def __init__(self, final: str | Path, header: dict[str, Any] | None = None, *, compresslevel: int = 3) -> None:
        self.final = Path(final)
        self._tmp = atomic_target(self.final)
        raw = open(self._tmp, "wb")
        if self.final.suffix == ".gz":
            self._out = io.TextIOWrapper(gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=compresslevel, mtime=0),
                                         encoding="utf-8", write_through=False)
            self._raw = raw
        else:
            self._out = io.TextIOWrapper(raw, encoding="utf-8")
            self._raw = None
        self._first = True
        self._batch: list[dict] = []
        self._encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
        self.count = 0
        self._out.write("{")
        for key, value in (header or {}).items():
            # the header as Kineto writes it (a space after each colon): tools find
            # the rank by that text (HolisticTraceAnalysis: '"rank":\s+(\d+)')
            self._out.write(f"{_dumps(key)}: {json.dumps(value, allow_nan=False)},\n")
        self._out.write(f'"{EVENTS_KEY}":[\n')

    def write(self, event: dict) -> None:
        self._batch.append(event)
        self.count += 1
        if len(self._batch) >= BATCH:
            self._flush()

    def _flush(self) -> None:
        """Encode a batch of events in one call of the C encoder (per-event
        calls cost more than the encoding itself)."""
        if not self._batch:
            return
        text = self._encode(self._batch)[1:-1]
        self._out.write(text if self._first else ",\n" + text)
        self._first = False
        self._batch.clear()

    def close(self, trailer: dict[str, Any] | None = None) -> Path:
        self._flush()
        self._out.write("\n]")
        for key, value in (trailer or {}).items():
            self._out.write(f",\n{_dumps(key)}:{_dumps(value)}")
        self._out.write("}\n")
        self._out.close()
        if self._raw is not None:
            self._raw.close()
        publish(self._tmp, self.final)
        return self.final

    def abort(self) -> None:
        try:
            self._out.close()
            if self._raw is not None:
                self._raw.close()
        finally:
            self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> "TraceWriter":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is not None:
            self.abort()
