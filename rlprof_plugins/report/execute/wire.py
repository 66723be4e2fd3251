"""What travels between a node and the machine running the report: JSON, compressed, one blob per answer.

A node's plan and each trace's summary (``TraceStats``) are written as JSON on the node and compressed,
so what travelled is counted to the byte (``analysis.bytes_returned``) and the same blob is what the node's
cache of passes keeps. JSON is read the same way by every Python and every release: no interpreter version,
class path or tampered cache entry can change what a blob turns into, and reading one runs no code.

JSON lacks a few of the values the report's passes return, so each is written as a one-key object naming it:

- ``{"__tuple__": [...]}`` a tuple (an iteration's key and record stay tuples);
- ``{"__items__": [[key, value], ...]}`` a dict whose keys are not all strings;
- ``{"__record__": [name, {field: value}]}`` one of the records a pass or a plan is made of (``RECORDS``: a
  trace's summary, the plan's views, a trace's job, a frontend's busy period, a step log's record), only
  those, each field checked against its class (an unknown one is refused); a record's ``path`` is a ``Path``.

Paths anywhere else travel as strings.
"""

from __future__ import annotations

import dataclasses
import json
import zlib
from collections import defaultdict
from pathlib import Path, PurePath
from typing import Any

from ...metrics.record import StepRecord
from ...metrics.requests import BusyPeriod
from ...trace.analysis.trace_stats import TraceJob, TraceStats
from ..plan.view import AnomalyView, Folder, GroupView, ServerView, StepView

_TUPLE, _ITEMS, _RECORD = "__tuple__", "__items__", "__record__"
# the records a blob may hold, by name; those with ``from_json`` travel as their ``to_json()``, others field by field
RECORDS = {cls.__name__: cls for cls in (TraceStats, ServerView, StepView, GroupView, AnomalyView, Folder, TraceJob,
                                         BusyPeriod, StepRecord)}
_FLOAT_TOTALS = ("device_ops", "cpu_self")  # a TraceStats' running sums: defaultdict(float) as the pass makes them


class WireError(ValueError):
    """A blob that is not a report answer in this format."""


def pack(value: Any) -> bytes:
    return zlib.compress(json.dumps(_plain(value), separators=(",", ":")).encode(), 6)


def unpack(blob: bytes) -> Any:
    try:
        data = json.loads(zlib.decompress(blob))
    except (zlib.error, ValueError) as e:
        raise WireError(f"not a report answer: {e}") from None
    return _typed(data)


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if RECORDS.get(type(value).__name__) is type(value):
        fields = value.to_json() if hasattr(value, "from_json") else {f: getattr(value, f) for f in _fields(value)}
        return {_RECORD: [type(value).__name__, _plain(fields)]}
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {k: _plain(v) for k, v in value.items()}
        return {_ITEMS: [[_plain(k), _plain(v)] for k, v in value.items()]}
    if isinstance(value, tuple):
        return {_TUPLE: [_plain(v) for v in value]}
    if isinstance(value, (list, set, frozenset)):
        return [_plain(v) for v in (sorted(value) if isinstance(value, (set, frozenset)) else value)]
    if isinstance(value, PurePath):
        return str(value)
    raise TypeError(f"a report answer holds plain data and the report's records only, not {type(value).__name__}")


def _typed(value: Any) -> Any:
    if isinstance(value, list):
        return [_typed(v) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        (key, inner), = value.items()
        if key == _TUPLE:
            return tuple(_typed(v) for v in inner)
        if key == _ITEMS:
            return {_typed(k): _typed(v) for k, v in inner}
        if key == _RECORD:
            return _record(inner)
    return {k: _typed(v) for k, v in value.items()}


def _fields(cls: Any) -> tuple[str, ...]:
    return getattr(cls, "_fields", None) or tuple(f.name for f in dataclasses.fields(cls))


def _record(inner: Any) -> Any:
    name, fields = inner if isinstance(inner, list) and len(inner) == 2 else (repr(inner), None)
    cls = RECORDS.get(name) if isinstance(name, str) else None
    if cls is None or not isinstance(fields, dict):
        raise WireError(f"not a record this release knows: {name}")
    unknown = set(fields) - set(_fields(cls)) if not hasattr(cls, "from_json") else set()
    if unknown:
        raise WireError(f"a {name} with fields this release does not know: {', '.join(sorted(unknown))}")
    try:
        if hasattr(cls, "from_json"):
            return cls.from_json(_typed(fields))
        typed = {k: _typed(v) for k, v in fields.items()}
        if "path" in typed:
            typed["path"] = Path(typed["path"] or "")
        for total in _FLOAT_TOTALS if cls is TraceStats else ():
            if total in typed:
                typed[total] = defaultdict(float, typed[total])
        return cls(**typed)
    except (TypeError, ValueError, KeyError) as e:  # a field missing, or a value of another kind
        raise WireError(f"a {name} that is not whole: {e}") from None
