"""Reading a Chrome trace in batches of events, never the whole file.

Rank traces reach gigabytes (users report tens of GB per rank); loading one
whole costs several times its size in Python objects, which is how mergers
run out of memory. ``TraceReader`` decodes the top-level keys one by one
and the ``traceEvents`` array a batch at a time: about a megabyte of text
cut after an event's closing brace and decoded in one call (``codec``).
A cut is only kept when ``[`` + text + ``]`` decodes as an array: a parser
that accepts that prefix was between two events there, whatever the layout,
so a brace inside a string or a nested object can cost a retry, never an
event. Memory is bounded by the batch size (or the largest single event).

Any layout is accepted (Kineto's indented output, compact one-line JSON,
the bare-array form of the Trace Event Format), plain or gzip (detected by
its magic bytes, not the name). An event Kineto wrote with bare quotes in a
string (Python frame names) is repaired, with one warning per file
(``repair``): no cut decodes across it, so it is read on its own.
"""

from __future__ import annotations

import codecs
import json
import re
import zlib
from pathlib import Path
from typing import Any, Callable, Iterator

from . import codec, gz, repair
from ..._log import logger

BATCH_BYTES = 1 << 20
CUT_TRIES = 3  # failed cuts per batch before one event is read on its own
_SEPARATORS = re.compile(rb"[\s,]*")
_SPACE = re.compile(rb"\s*")
EVENTS_KEY = "traceEvents"
_VALUE_WINDOW = 1 << 16
_MSGSPEC_AT = re.compile(r"\(byte (\d+)\)")


def _error_offset(error: BaseException | None) -> int | None:
    """Where a decoder gave up, in the text it was given (``json``: ``pos``,
    in characters, the same as bytes for the ASCII around a cut; msgspec:
    ``(byte N)`` in its message). Only a hint for the next cut."""
    pos = getattr(error, "pos", None)
    if isinstance(pos, int):
        return pos
    m = _MSGSPEC_AT.search(str(error or ""))
    return int(m.group(1)) if m else None


class TraceFormatError(ValueError):
    """The file is not a readable Chrome trace; the message names the file."""


class TraceReader:
    """Stream one trace file.

    ``header`` holds the top-level keys before ``traceEvents`` as soon as the
    reader is opened; ``batches()`` (lists of events) or ``events()`` (one
    at a time) yield the events once; ``trailer`` holds the keys after the
    array once they are exhausted.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.header: dict[str, Any] = {}
        self.trailer: dict[str, Any] = {}
        self._decoder = json.JSONDecoder()
        try:
            self._chunks = gz.Inflated(self.path)
        except OSError as e:
            raise TraceFormatError(f"{self.path}: cannot open: {e.strerror or e}") from None
        self._buf = b""
        self._pos = 0
        self._eof = False
        self._array_form = False
        self._consumed = False
        self.repaired_events = 0  # events whose bare quotes were escaped
        try:
            self._read_header()
        except BaseException:
            self.close()
            raise

    def _repaired(self, quotes: int) -> None:
        """Kineto's unescaped quotes were escaped in an event (``repair``): said once per file."""
        if not self.repaired_events:
            logger.warning("rlprof: %s: repaired invalid JSON written by Kineto (unescaped quotes in a string, "
                           "%d escaped); the events are kept", self.path, quotes)
        self.repaired_events += 1

    @property
    def bytes_read(self) -> int:
        """The file's bytes consumed so far (compressed ones for gzip: progress against its size)."""
        return self._chunks.consumed

    # ---- low-level buffer -----------------------------------------------
    def _fill(self) -> bool:
        if self._eof:
            return False
        try:
            chunk = next(self._chunks, b"")
        except FileNotFoundError as e:
            raise TraceFormatError(f"{self.path}: cannot open: {e.strerror or e}") from None
        except (OSError, EOFError, zlib.error) as e:
            raise TraceFormatError(f"{self.path}: corrupt or truncated: {e}") from None
        if not chunk:
            self._eof = True
            return False
        self._buf = self._buf[self._pos:] + chunk
        self._pos = 0
        return True

    def _skip(self) -> bytes:
        """Skip whitespace and commas; return the next byte (b'' at EOF)."""
        while True:
            self._pos = _SEPARATORS.match(self._buf, self._pos).end()
            if self._pos < len(self._buf):
                return self._buf[self._pos:self._pos + 1]
            if not self._fill():
                return b""

    def _expect(self, char: bytes) -> None:
        if self._skip() != char:
            got = self._buf[self._pos:self._pos + 20].decode("utf-8", "replace") or "end of file"
            raise TraceFormatError(f"{self.path}: not a Chrome trace (expected {char.decode()!r}, found {got!r})")
        self._pos += 1

    def _value(self) -> Any:
        """One JSON value at the cursor, through the standard library's
        decoder on a window of text (header values, and events no batch cut
        could reach)."""
        self._skip()
        window = _VALUE_WINDOW
        while True:
            piece = self._buf[self._pos:self._pos + window]
            text = codecs.getincrementaldecoder("utf-8")("replace").decode(piece, final=False)
            try:
                value, end = self._decoder.raw_decode(text)
            except json.JSONDecodeError as e:
                # Cut by the window's or buffer's end: widen or read more and
                # retry. Anything else is corrupt.
                cut = e.pos >= len(text) - 1 or e.msg.startswith("Unterminated string")
                if cut and self._pos + window < len(self._buf):
                    window *= 4
                    continue
                if cut and self._fill():
                    continue
                repaired = None if cut else repair.decode_repaired(self._decoder, text)
                if repaired is None:
                    raise TraceFormatError(f"{self.path}: corrupt or truncated JSON: {e.msg}") from None
                value, end, quotes = repaired
                self._repaired(quotes)
                self._pos += len(text[:end].encode("utf-8"))
                return value
            # A number or literal cut by the end may decode short.
            if end == len(text) and not isinstance(value, (dict, list, str)):
                if self._pos + window < len(self._buf):
                    window *= 4
                    continue
                if self._fill():
                    continue
            self._pos += len(text[:end].encode("utf-8"))
            return value

    # ---- structure ------------------------------------------------------
    def _read_header(self) -> None:
        first = self._skip()
        if first == b"[":
            self._pos += 1
            self._array_form = True
            return
        self._expect(b"{")
        while True:
            if self._skip() == b"}":
                self._pos += 1
                self._consumed = True
                return
            key = self._value()
            if not isinstance(key, str):
                raise TraceFormatError(f"{self.path}: not a Chrome trace (bad key {key!r})")
            self._expect(b":")
            if key == EVENTS_KEY:
                self._expect(b"[")
                return
            self.header[key] = self._value()

    def _cut_batch(self, decode: Callable[[bytes], list] | None) -> list | None:
        """The complete events at the cursor, up to about ``BATCH_BYTES``, or
        None when no cut decodes (then the caller reads one event alone)."""
        while len(self._buf) - self._pos < BATCH_BYTES and self._fill():
            pass
        buf, start = self._buf, self._pos
        end, failures = min(len(buf), start + BATCH_BYTES), 0
        while failures < CUT_TRIES:
            k = buf.rfind(b"}", start, end)
            if k < 0:
                return None
            after = _SPACE.match(buf, k + 1).end()
            end = k
            if after == len(buf) or buf[after] not in b",]":
                continue  # inside an event (or what follows is not read yet)
            text = b"[" + buf[start:k + 1] + b"]"
            events, error = None, None
            try:
                with codec.gc_paused():
                    events = decode(text) if decode is not None else codec.decode(text)
            except ValueError as e:
                error = e
                if decode is not None:  # what the fields decoder rejects (NaN, ...), the full one may take
                    try:
                        events = codec.decode(text)
                    except ValueError as e2:
                        error = e2
            if events is None:
                failures += 1
                # Where parsing stopped: a cut past the array's end (into the keys after it,
                # whose nested objects end in '},') stops at the array's end: look before it.
                stop = _error_offset(error)
                if stop is not None and start < start + stop - 1 < k:
                    end = start + stop - 1
                continue
            self._pos = k + 1
            return events
        return None

    def batches(self, decode: Callable[[bytes], list] | None = None) -> Iterator[list[dict]]:
        """Lists of events; ``decode`` (``codec.fields_decoder``) may build
        lighter items than dicts."""
        if self._consumed:
            return
        self._consumed = True
        while True:
            c = self._skip()
            if c == b"]":
                self._pos += 1
                break
            if c == b"":
                raise TraceFormatError(f"{self.path}: truncated (traceEvents not closed)")
            batch = self._cut_batch(decode)
            if batch is None:
                batch = [self._value()]
            for kind in {event.__class__ for event in batch}:
                if kind is not dict and not codec.is_fields(kind):
                    bad = next(e for e in batch if e.__class__ is kind)
                    raise TraceFormatError(f"{self.path}: an event is not an object: {bad!r:.80}")
            yield batch
        if not self._array_form:
            self._read_trailer()

    def events(self) -> Iterator[dict]:
        for batch in self.batches():
            yield from batch

    def _read_trailer(self) -> None:
        while True:
            c = self._skip()
            if c == b"}":
                self._pos += 1
                return
            if c == b"":
                raise TraceFormatError(f"{self.path}: truncated (top-level object not closed)")
            key = self._value()
            self._expect(b":")
            self.trailer[key] = self._value()

    def close(self) -> None:
        self._chunks.close()

    def __enter__(self) -> "TraceReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
