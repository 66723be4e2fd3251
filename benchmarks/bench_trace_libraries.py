"""Benchmark: which JSON and gzip libraries the trace tools should use.

On the given traces (real ones where you have them), in one process:

- gzip: inflate speed, deflate speed and ratio at level 3 for ``zlib``
  (Python's), ``zlib-ng`` and ``isal`` (at its levels 1 and 3, which are not
  zlib's), as installed;
- JSON: decoding the event array in 1 MB batches (as ``trace/format/reader.py``
  does) with the cycle collector on and paused, and encoding it, for
  ``json``, ``orjson`` and ``msgspec``, as installed; and whether each keeps
  an integer wider than 64 bits exact (traces carry them).

Usage: ``python benchmarks/bench_trace_libraries.py TRACE.json.gz ...``;
``pip install orjson isal`` first to compare those too (not dependencies).
"""

from __future__ import annotations

import gc
import gzip
import importlib
import json
import sys
import time
import zlib
from pathlib import Path

LEVEL = 3
BATCH = 1 << 20


def _gzip_libraries() -> dict:
    libs = {"zlib": (zlib, [LEVEL])}
    for name, module, levels in (("zlib-ng", "zlib_ng.zlib_ng", [LEVEL]), ("isal", "isal.isal_zlib", [1, 3])):
        try:
            libs[name] = (importlib.import_module(module), levels)
        except ImportError:
            pass
    return libs


def _json_libraries() -> dict:
    libs = {"json": (json.loads, json.JSONEncoder(separators=(",", ":")).encode)}
    try:
        import orjson
        libs["orjson"] = (orjson.loads, orjson.dumps)
    except ImportError:
        pass
    try:
        import msgspec
        libs["msgspec"] = (msgspec.json.Decoder().decode, msgspec.json.Encoder().encode)
    except ImportError:
        pass
    return libs


def _batches(events_text: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(events_text):
        cut = events_text.find(b"},", pos + BATCH)
        end = len(events_text) if cut < 0 else cut + 1
        out.append(b"[" + events_text[pos:end] + b"]")
        pos = end + 1
    return out


def measure(path: Path) -> list[str]:
    raw = gzip.open(path).read()
    compressed = path.read_bytes()
    rows = []
    for name, (mod, levels) in _gzip_libraries().items():
        t = time.perf_counter()
        mod.decompressobj(31).decompress(compressed)
        inflate = len(raw) / (time.perf_counter() - t) / 1e6
        for level in levels:
            t = time.perf_counter()
            c = mod.compressobj(level, zlib.DEFLATED, 31)
            size = len(c.compress(raw) + c.flush())
            rows.append(f"| {path.name} | gzip | {name} level {level} | inflate {inflate:,.0f} MB/s, deflate "
                        f"{len(raw) / (time.perf_counter() - t) / 1e6:,.0f} MB/s, ratio {len(raw) / size:.1f} |")
    events = json.loads(raw)["traceEvents"]
    text = json.dumps(events).encode()[1:-1]
    batches = _batches(text)
    n = len(events)
    del events
    for name, (decode, encode) in _json_libraries().items():
        timings = []
        for paused in (False, True):
            if paused:
                gc.disable()
            t = time.perf_counter()
            for b in batches:
                decode(b)
            timings.append((time.perf_counter() - t) / n * 1e6)
            gc.enable()
        sample = decode(batches[0])
        t = time.perf_counter()
        encode(sample)
        enc = (time.perf_counter() - t) / len(sample) * 1e6
        try:
            exact = decode(b"[18446744073709551616]")[0] == 2**64 and isinstance(decode(b"[18446744073709551616]")[0], int)
        except Exception:  # noqa: BLE001 - a library that refuses is not exact either
            exact = False
        rows.append(f"| {path.name} | JSON | {name} | decode {timings[0]:.2f} us/event (collector on), "
                    f"{timings[1]:.2f} (paused); encode {enc:.2f} us/event; 65-bit integer exact: "
                    f"{'yes' if exact else 'no'} |")
    return rows


def main() -> int:
    paths = [Path(p) for p in sys.argv[1:]]
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    print("| trace | what | library | measured |\n| --- | --- | --- | --- |")
    for p in paths:
        print("\n".join(measure(p)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
