"""What travels between a node and the machine running the report: one compressed blob per answer.

A node's listing and each trace's summary (``TraceStats``) are pickled and
compressed on the node, so what travelled is counted to the byte
(``analysis.bytes_returned``) and the same blob is what the node's cache of
passes keeps. Unpacking builds plain data and ``TraceStats`` only: a blob
that names any other class or function (a tampered cache file, a node
running something else) is refused, not executed.
"""

from __future__ import annotations

import pickle
import zlib
from typing import Any

_ALLOWED = {
    ("rlprof_plugins.trace.analysis.trace_stats", "TraceStats"),
    ("collections", "defaultdict"),
    ("pathlib", "PosixPath"),
    ("pathlib", "PurePosixPath"),
    ("builtins", "float"),
    ("builtins", "int"),
    ("builtins", "str"),
    ("builtins", "list"),
    ("builtins", "dict"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
}


class _PlainOrStats(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"a report blob holds plain data and trace summaries only; "
                                     f"this one asks for {module}.{name}")


def pack(value: Any) -> bytes:
    return zlib.compress(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL), 6)


def unpack(blob: bytes) -> Any:
    import io

    return _PlainOrStats(io.BytesIO(zlib.decompress(blob))).load()
