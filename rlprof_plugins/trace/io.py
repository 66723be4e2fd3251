"""Reading and atomically writing Chrome trace files (plain or gzip)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from ..layout import atomic_target, publish


def load(path: str | Path) -> dict:
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        data = json.load(f)
    if isinstance(data, list):  # the array form of the Trace Event Format
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise ValueError(f"{path}: not a Chrome trace (no traceEvents list)")
    return data


def save(trace: dict, final: Path) -> Path:
    """Write ``trace`` to ``final`` through a temporary file and a rename."""
    tmp = atomic_target(final)
    try:
        opener = gzip.open if final.suffix == ".gz" else open
        with opener(tmp, "wt", encoding="utf-8") as f:
            json.dump(trace, f, separators=(",", ":"))
        publish(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    return final
