"""Device time as a partition of a rank's recorded iterations: compute, exposed communication, exposed memcpy, idle.

The device work of an iteration is the work its host side launched: a
kernel, copy or memset belongs to the iteration its launching runtime call
(``cudaLaunchKernel``, ``hipLaunchKernel``, ``cudaMemcpyAsync`` ...), found by
correlation id, started in; a replayed CUDA or HIP graph's kernels carry the
``cudaGraphLaunch``/``hipGraphLaunch``'s id, so they belong to the iteration
that replayed the graph. Work nothing in an iteration launched (warm-up,
another session's tail) is left out.

The window is the first such item's start to the last one's end, and it is
split the way HolisticTraceAnalysis's temporal breakdown and TraceLens's GPU
timeline split it, over the intervals merged across every stream:

- **compute**: the merged intervals of computation kernels;
- **exposed communication**: the merged intervals of communication kernels
  (NCCL, RCCL, HCCL ...) that no compute covers;
- **exposed memcpy**: the merged intervals of copies and memsets that
  neither covers;
- **idle**: the rest of the window.

The four add up to the window. The totals (``communication_ms``,
``memcpy_ms``: each class's merged intervals, covered or not) stay beside
them, and so does the share of communication that compute hid
(``communication_overlap_pct``).

A trace with no iteration at all (a user's trace without ``ProfilerStep``
ranges) has its whole device timeline as one window: there is nothing else
to restrict it to.

Memory: during the pass, flat arrays (about 16 bytes a launch, 25 a kernel);
at the end, per-iteration lists of the kernels' indices.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from typing import Any, Iterable

from .time_split import MEMORY_CATS, is_communication

# Kineto's categories of host calls that launch device work: CUDA's and HIP's runtime (ROCm's Kineto files
# its HIP calls under the same category), and the driver API (cuLaunchKernel)
LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver"})
COMPUTE, COMMUNICATION, MEMCPY = 0, 1, 2
FIELDS = ("window_ms", "compute_ms", "exposed_communication_ms", "exposed_memcpy_ms", "idle_ms",
          "communication_ms", "memcpy_ms")


def kind_of(cat: str, name: str) -> int:
    """A device item's class: a copy or memset, a collective kernel, else computation."""
    return MEMCPY if cat in MEMORY_CATS else COMMUNICATION if is_communication(name) else COMPUTE


class DeviceWork:
    """The launches and the device items of one trace, gathered as the events stream in."""

    def __init__(self) -> None:
        self.launch_ids, self.launch_ts = array("q"), array("d")
        self.ids, self.starts, self.ends, self.kinds = array("q"), array("d"), array("d"), array("b")
        self._kind_of: dict[tuple[str, str], int] = {}  # kernel names repeat: the collective regex once each

    def launch(self, correlation: Any, ts: float) -> None:
        if isinstance(correlation, int):
            self.launch_ids.append(correlation)
            self.launch_ts.append(ts)

    def item(self, correlation: Any, cat: str, name: str, start: float, dur: float) -> None:
        self.ids.append(correlation if isinstance(correlation, int) else -1)
        self.starts.append(start)
        self.ends.append(start + dur)
        kind = self._kind_of.get((cat, name))
        if kind is None:
            kind = self._kind_of[cat, name] = kind_of(cat, name)
        self.kinds.append(kind)

    @property
    def seen(self) -> bool:
        return len(self.starts) > 0

    def per_iteration(self, windows: list[tuple[float, float]]) -> list[list[int]]:
        """The device items' indices per iteration (``windows``: each iteration's host start and end, in
        start order), each item in the iteration its launch started in."""
        out: list[list[int]] = [[] for _ in windows]
        if not windows or not self.seen:
            return out
        ids, ts = self.launch_ids, self.launch_ts
        if any(ids[k] > ids[k + 1] for k in range(len(ids) - 1)):  # correlation ids rise with launches, mostly
            order = sorted(range(len(ids)), key=ids.__getitem__)
            ids, ts = array("q", (ids[k] for k in order)), array("d", (ts[k] for k in order))
        starts = [w[0] for w in windows]
        ends = [w[1] for w in windows]
        for k, correlation in enumerate(self.ids):
            if correlation < 0:
                continue
            j = bisect_left(ids, correlation)
            if j == len(ids) or ids[j] != correlation:
                continue  # launched before the trace began, or by nothing the trace kept
            launched = ts[j]
            i = bisect_right(starts, launched) - 1
            if i >= 0 and launched <= ends[i]:
                out[i].append(k)
        return out

    def intervals(self, indices: Iterable[int] | None = None) -> list[tuple[float, float, int]]:
        """(start, end, class) of the given items (all where None), in start order."""
        ks = range(len(self.starts)) if indices is None else indices
        return sorted((self.starts[k], self.ends[k], self.kinds[k]) for k in ks)


def partition(intervals: list[tuple[float, float, int]]) -> dict[str, float] | None:
    """The window of ``intervals`` (start, end, class; in start order) split into compute, exposed
    communication, exposed memcpy and idle, with each class's total beside; microseconds. None: no interval."""
    if not intervals:
        return None
    merged: tuple[list[list[float]], ...] = ([], [], [])
    for start, end, kind in intervals:
        into = merged[kind]
        if into and start <= into[-1][1]:
            if end > into[-1][1]:
                into[-1][1] = end
        else:
            into.append([start, end])
    compute, communication, memcpy = merged
    compute_us, communication_us, memcpy_us = _length(compute), _length(communication), _length(memcpy)
    exposed_communication = communication_us - _overlap(communication, compute)
    covered = _union(compute, communication)
    exposed_memcpy = memcpy_us - _overlap(memcpy, covered)
    window = max(end for _, end, _ in intervals) - intervals[0][0]
    idle = max(0.0, window - compute_us - exposed_communication - exposed_memcpy)
    return {"window": window, "compute": compute_us, "exposed_communication": exposed_communication,
            "exposed_memcpy": exposed_memcpy, "idle": idle, "communication": communication_us, "memcpy": memcpy_us}


def add(total: dict[str, float] | None, part: dict[str, float] | None) -> dict[str, float] | None:
    """Two partitions' sums (a stage's iterations together)."""
    if part is None:
        return total
    if total is None:
        return dict(part)
    return {k: total[k] + part[k] for k in total}


def in_ms(us: dict[str, float] | None) -> dict[str, Any] | None:
    """A partition as the report writes it: ``FIELDS`` in ms, and the share of communication compute hid."""
    if us is None:
        return None
    out: dict[str, Any] = {f"{k}_ms": round(us[k] / 1000.0, 3) for k in
                           ("window", "compute", "exposed_communication", "exposed_memcpy", "idle", "communication",
                            "memcpy")}
    out["communication_overlap_pct"] = (round(100.0 * (1 - us["exposed_communication"] / us["communication"]), 1)
                                        if us["communication"] else None)
    return out


def _length(merged: list[list[float]]) -> float:
    return sum(end - start for start, end in merged)


def _overlap(a: list[list[float]], b: list[list[float]]) -> float:
    """The length two lists of disjoint intervals (in order) share."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if end > start:
            total += end - start
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def _union(a: list[list[float]], b: list[list[float]]) -> list[list[float]]:
    out: list[list[float]] = []
    for start, end in sorted(a + b):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1][1] = end
        else:
            out.append([start, end])
    return out
