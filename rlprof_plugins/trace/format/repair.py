"""Kineto's invalid JSON, and its repair.

With Python stacks on, Kineto writes frame names as they come, without
escaping: a frame such as ``torch/_export/passes/_node_metadata_hook.py(0):
"cuda.version"`` puts bare quotes inside a string, and the whole file stops
being JSON: every viewer and every ``rlprof`` tool
refuses it, and the recording is lost for analysis. Two repairs, both only
ever adding a backslash before a quote that cannot end its string:

- ``repair_lines``: for the writers (the exporter copies Kineto's file into
  place). Kineto writes each event's name on the line
  ``"name": "<name>",`` at the end of a line (recent torch), or followed by
  ``, "pid": `` on the event's one line (older Kineto); a name whose quotes
  are not all escaped is escaped, with one regular-expression pass over the
  bytes (no JSON parsing in the engine's process).
- ``decode_repaired``: for the reader, any layout. Where the decoder stops
  right after a quote (it expected a ``,`` or ``:`` and found more text), that
  quote closed its string early: it is escaped and decoding resumes, a
  bounded number of times.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterator

# A Kineto name whose text holds a quote that does not end it: the escape-aware
# content, an unescaped quote, the rest; then the end of the name as Kineto
# lays it out: `", "pid": ` (one line per event, older Kineto) or `",` and the
# end of the line (one line per key).
_BAD_NAME = re.compile(rb'("name": ")((?:[^"\\\n]|\\.)*"[^\n]*?)(", "pid": |",?[ \t]*(?=\r?\n|\Z))')
_BARE_QUOTE = re.compile(rb'(?<!\\)"')
REPAIRS_PER_VALUE = 64


def _escape(m: re.Match) -> bytes:
    return m.group(1) + _BARE_QUOTE.sub(rb'\\"', m.group(2)) + m.group(3)


def repair_lines(pieces: Iterator[bytes]) -> Iterator[bytes]:
    """``pieces`` of a Kineto trace, with every name's bare quotes escaped
    (each piece cut after its last newline, so no name line is split)."""
    carry = b""
    for piece in pieces:
        data = carry + piece
        cut = data.rfind(b"\n") + 1
        carry = data[cut:]
        if cut:
            yield _BAD_NAME.sub(_escape, data[:cut]) if b'"name": "' in data else data[:cut]
    if carry:
        yield _BAD_NAME.sub(_escape, carry)


def decode_repaired(decoder: json.JSONDecoder, text: str) -> tuple[Any, int, int] | None:
    """The JSON value at the start of ``text``, escaping quotes that ended a
    string early: (value, where it ends in ``text``, quotes escaped), or None
    when the text is broken some other way."""
    inserted: list[int] = []
    for _ in range(REPAIRS_PER_VALUE):
        try:
            value, end = decoder.raw_decode(text)
        except json.JSONDecodeError as e:
            if not e.msg.startswith(("Expecting ',' delimiter", "Expecting ':' delimiter")):
                return None
            k = e.pos - 1
            while k > 0 and text[k] in " \t\r\n":
                k -= 1
            if k <= 0 or text[k] != '"' or text[k - 1] == "\\":
                return None
            text = text[:k] + "\\" + text[k:]
            inserted.append(k)
            continue
        return value, end - len(inserted), len(inserted)
    return None
