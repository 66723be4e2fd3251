"""Each rank's device memory over a step's window, from its PyTorch memory snapshot (``memory/<rank>.pickle``).

The snapshot holds the allocator's segments at the window's end and its allocations and frees over the
window (the allocator's own trace); played backwards from the end, the history gives allocated and
reserved bytes after every event, and at the peak the largest allocations still alive with the frames
that made them. The pickle is read by an unpickler that builds plain data only: a file that asks for a
class or a function is refused, not run. (PyTorch's own viewer loads its script from the network; this
keeps the report offline.)
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

MB = 1 << 20
POINTS = 240  # timeline points per rank at most (each bucket keeps its highest allocated point)
TOP = 8  # allocations listed at the peak
FRAMES = 4  # frames shown per allocation, innermost first, torch's own left out
_ALLOCATED = {"alloc": 1, "free_completed": -1}
_RESERVED = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}


class _PlainData(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"a memory snapshot holds plain data only; this file asks for {module}.{name}")


def read_snapshot(path: Path) -> dict[str, Any]:
    with open(path, "rb") as f:
        data = _PlainData(f).load()
    if not isinstance(data, dict) or "segments" not in data:
        raise ValueError(f"{path}: not a PyTorch memory snapshot (no segments)")
    return data


def snapshot_numbers(path: Path) -> dict[str, Any]:
    """The snapshot at ``path`` read (``read_snapshot``) and its numbers made (``rank_memory``): what the
    report's memory pass runs."""
    return rank_memory(read_snapshot(path))


def rank_memory(snapshot: dict[str, Any]) -> dict[str, Any]:
    events = sorted((e for trace in snapshot.get("device_traces") or [] for e in trace),
                    key=lambda e: e.get("time_us", 0))
    segments = snapshot.get("segments") or []
    end_allocated = sum(s.get("allocated_size", 0) for s in segments)
    end_reserved = sum(s.get("total_size", 0) for s in segments)
    allocated = end_allocated - sum(_ALLOCATED.get(e["action"], 0) * e["size"] for e in events)
    reserved = end_reserved - sum(_RESERVED.get(e["action"], 0) * e["size"] for e in events)
    start = (allocated, reserved)
    t0 = events[0].get("time_us", 0) if events else 0
    points: list[tuple[float, int, int]] = [(0.0, allocated, reserved)] if events else []
    peak, peak_at, peak_reserved = (allocated, 0.0), -1, reserved  # the peak before any event: the start
    for k, e in enumerate(events):
        allocated += _ALLOCATED.get(e["action"], 0) * e["size"]
        reserved += _RESERVED.get(e["action"], 0) * e["size"]
        ms = (e.get("time_us", t0) - t0) / 1000.0
        points.append((ms, allocated, reserved))
        peak_reserved = max(peak_reserved, reserved)
        if allocated > peak[0]:
            peak, peak_at = (allocated, ms), k
    return {
        "entries": len(events), "span_ms": round(points[-1][0], 3) if points else 0.0,
        "start_allocated_mb": _mb(start[0]), "start_reserved_mb": _mb(start[1]),
        "end_allocated_mb": _mb(end_allocated), "end_reserved_mb": _mb(end_reserved),
        "peak_allocated_mb": _mb(peak[0]), "peak_reserved_mb": _mb(peak_reserved), "peak_at_ms": round(peak[1], 3),
        "top_at_peak": _alive_at(events, peak_at),
        "timeline": [[round(ms, 3), _mb(a), _mb(r)] for ms, a, r in _thin(points)],
    }


def _alive_at(events: list[dict[str, Any]], upto: int) -> list[dict[str, Any]]:
    """The largest allocations of the window still alive after event ``upto``."""
    alive: dict[int, dict[str, Any]] = {}
    for e in events[:upto + 1]:
        if e["action"] == "alloc":
            alive[e["addr"]] = e
        elif e["action"] in ("free_requested", "free_completed"):
            alive.pop(e["addr"], None)
    biggest = sorted(alive.values(), key=lambda e: -e["size"])[:TOP]
    return [{"mb": _mb(e["size"]), "frames": _frames(e.get("frames") or [])} for e in biggest]


def _frames(frames: list[dict[str, Any]]) -> list[str]:
    """The allocating code: the innermost frames outside torch itself."""
    own = [f for f in frames if "/torch/" not in str(f.get("filename", "")).replace("\\", "/")] or frames
    return [f"{f.get('name')} ({Path(str(f.get('filename'))).name}:{f.get('line')})" for f in own[:FRAMES]]


def _thin(points: list[tuple[float, int, int]]) -> list[tuple[float, int, int]]:
    if len(points) <= POINTS:
        return points
    size = -(-len(points) // POINTS)
    return [max(points[k:k + size], key=lambda p: p[1]) for k in range(0, len(points), size)]


def _mb(n: int) -> float:
    return round(n / MB, 3)
