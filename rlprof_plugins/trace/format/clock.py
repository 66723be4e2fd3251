"""A trace's clock: event times in exact nanoseconds, and where its timeline begins.

Kineto writes relative microseconds with a ``baseTimeNanoseconds`` (in the
header in recent torch, after the events in older Kineto); torch_npu writes
absolute microseconds as strings. The merge puts every rank on one timeline
from these; the summary measures durations with ``ts_ns``.
"""

from __future__ import annotations

import re
import zlib
from pathlib import Path
from typing import Any

from . import gz
from .reader import TraceFormatError, TraceReader

BASE_TIME = re.compile(rb'"baseTimeNanoseconds"\s*:\s*(\d+)')  # found in raw bytes, no JSON parsing


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
    try:
        for chunk in gz.read_chunks(reader.path):
            tail = (tail + chunk)[-4096:]
    except (OSError, EOFError, zlib.error) as e:
        raise TraceFormatError(f"{reader.path}: corrupt or truncated: {e}") from None
    found = BASE_TIME.findall(tail)
    return int(found[-1]) if found else None
