"""JSON for trace events: msgspec when installed, the standard library otherwise.

The trace tools spend most of their time turning event text into objects
and back. Measured on real Kineto GPU traces (docs/performance.md, "Which
libraries"): msgspec decodes about twice as fast as ``json`` and encodes
about ten times as fast, and, unlike orjson, keeps integers wider than 64
bits exact (traces carry them; a float would silently change them). vLLM
already depends on msgspec, so engine environments have it; the ``fast``
extra installs it elsewhere. Without it everything works, slower.

What neither fast path takes (``NaN``/``Infinity``, numbers out of a
double's range: accepted by Python's ``json``) falls back to ``json`` for
that batch only, so any file the standard library reads is read. (Written
back, msgspec makes a ``NaN`` ``null``: the output stays valid JSON.)

``RLPROF_TRACE_ACCEL`` (``none``, or a comma list of ``msgspec``,
``zlib-ng``) limits which accelerators are used: the benchmark measures
each one's share, and the tests run both paths.
"""

from __future__ import annotations

import gc
import json
import os
from contextlib import contextmanager
from typing import Any, Callable, Iterator

ENV = "RLPROF_TRACE_ACCEL"


def allowed(name: str) -> bool:
    """Whether accelerator ``name`` may be used (all may, unless ``RLPROF_TRACE_ACCEL`` says otherwise)."""
    setting = os.environ.get(ENV)
    if setting is None:
        return True
    return name in {s.strip() for s in setting.split(",")}


try:
    if not allowed("msgspec"):
        raise ImportError
    import msgspec

    _decode_fast = msgspec.json.Decoder().decode
    _encode_fast = msgspec.json.Encoder().encode
    FAST_ERRORS: tuple = (msgspec.DecodeError, msgspec.EncodeError, OverflowError, TypeError, ValueError)
    JSON_LIBRARY = "msgspec"
except ImportError:  # the standard library only
    msgspec = None
    _decode_fast = None
    _encode_fast = None
    FAST_ERRORS = ()
    JSON_LIBRARY = "json"

_encode_std = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


if msgspec is not None:
    class _Fields(msgspec.Struct):
        """Some fields of an event, read like the event's dict (absent or null: ``None``)."""

        def get(self, key: str, default: Any = None) -> Any:
            value = getattr(self, key, None)
            return default if value is None else value

        def __getitem__(self, key: str) -> Any:
            value = getattr(self, key, None)
            if value is None:
                raise KeyError(key)
            return value

        def __contains__(self, key: str) -> bool:
            return getattr(self, key, None) is not None


def is_fields(kind: type) -> bool:
    """Whether ``kind`` is a ``fields_decoder`` item type."""
    return msgspec is not None and issubclass(kind, _Fields)


def fields_decoder(*names: str, args: tuple[str, ...] = ()) -> Callable[[bytes], list] | None:
    """A decoder of event arrays that keeps only ``names`` (msgspec skips the
    rest without building it: several times faster for a pass that needs a
    few fields), and of ``args`` only the keys in ``args``; None without
    msgspec. The items (and their ``args``) answer ``get``, ``[]`` and ``in``
    like the event dicts. An event whose ``args`` is no object fails the
    batch's fast decoding, which then falls back to ``json``."""
    if msgspec is None:
        return None
    fields: list[tuple] = [(n, Any, None) for n in names]
    if args:
        kept = msgspec.defstruct("Args", [(n, Any, None) for n in args], bases=(_Fields,))
        fields.append(("args", kept | None, None))
    cls = msgspec.defstruct("Fields", fields, bases=(_Fields,))
    return msgspec.json.Decoder(list[cls]).decode


@contextmanager
def gc_paused() -> Iterator[None]:
    """Decoding a batch creates tens of thousands of dicts at once; letting
    the cycle collector run every few hundred of them more than doubles
    decoding time, and event dicts hold no cycles."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def decode(data: bytes) -> Any:
    """One JSON document (bytes)."""
    if _decode_fast is not None:
        try:
            return _decode_fast(data)
        except FAST_ERRORS:
            pass
    return json.loads(data)


def encode_events(events: list) -> bytes:
    """Events as compact JSON, comma-separated, without the enclosing brackets."""
    if _encode_fast is not None:
        try:
            return _encode_fast(events)[1:-1]
        except FAST_ERRORS:
            pass
    return _encode_std(events)[1:-1].encode("utf-8")


def encode(value: Any) -> bytes:
    """One JSON document, compact (msgspec where it can; ``json`` for what it cannot, e.g. NaN)."""
    if _encode_fast is not None:
        try:
            return _encode_fast(value)
        except FAST_ERRORS:
            pass
    return _encode_std(value).encode("utf-8")


def encode_value(value: Any) -> bytes:
    """One header or trailer value, as Kineto writes them (any JSON value)."""
    return json.dumps(value, ensure_ascii=False).encode("utf-8")
