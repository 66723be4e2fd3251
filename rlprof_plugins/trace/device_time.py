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

Memory: during the pass, flat arrays of the device items (25 bytes an
item) and of the launches (16 bytes a launch, a chunk at a time: ``spill``);
at the end, each item's iteration and its place in correlation order (16
bytes an item) and the merged intervals as flat arrays. The items are walked in start order without sorting them:
a trace lists each stream's kernels in start order, so the few ascending
runs are merged as they are read (``in_order``).
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left, bisect_right
from typing import Any, Iterator

from .spill import SpilledColumns
from .time_split import MEMORY_CATS, is_communication

# Kineto's categories of host calls that launch device work: CUDA's and HIP's runtime (ROCm's Kineto files
# its HIP calls under the same category), and the driver API (cuLaunchKernel)
LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver"})
COMPUTE, COMMUNICATION, MEMCPY = 0, 1, 2
FIELDS = ("window_ms", "compute_ms", "exposed_communication_ms", "exposed_memcpy_ms", "idle_ms",
          "communication_ms", "memcpy_ms")


def _is_id(correlation: Any) -> bool:
    """A correlation id the arrays hold (CUPTI's count up from 1; anything else: no id)."""
    return isinstance(correlation, int) and 0 <= correlation < 1 << 63


def kind_of(cat: str, name: str) -> int:
    """A device item's class: a copy or memset, a collective kernel, else computation."""
    return MEMCPY if cat in MEMORY_CATS else COMMUNICATION if is_communication(name) else COMPUTE


class DeviceWork:
    """The launches and the device items of one trace, gathered as the events stream in."""

    def __init__(self) -> None:
        self.launches = SpilledColumns("q", "d")  # each launch's correlation id and start, a chunk at a time
        self._launch_ids, self._launch_ts = self.launches.columns
        self.ids, self.starts, self.ends, self.kinds = array("q"), array("d"), array("d"), array("b")
        self._kind_of: dict[tuple[str, str], int] = {}  # kernel names repeat: the collective regex once each

    def launch(self, correlation: Any, ts: float) -> None:
        if _is_id(correlation):
            self._launch_ids.append(correlation)
            self._launch_ts.append(ts)
            if len(self._launch_ts) >= self.launches.chunk:
                self.launches.added()

    def item(self, correlation: Any, cat: str, name: str, start: float, dur: float) -> None:
        self.ids.append(correlation if _is_id(correlation) else -1)
        self.starts.append(start)
        self.ends.append(start + dur)
        kind = self._kind_of.get((cat, name))
        if kind is None:
            kind = self._kind_of[cat, name] = kind_of(cat, name)
        self.kinds.append(kind)

    @property
    def seen(self) -> bool:
        return len(self.starts) > 0

    def partitions(self, windows: list[tuple[float, float]]) -> tuple[dict[str, float] | None,
                                                                      list[dict[str, float] | None]]:
        """The partition of every item the iterations launched, and each iteration's (``windows``: each
        iteration's host start and end, in start order). Without windows: every item, one window. The
        items are walked once, in start order, each into its rank's and its iteration's merged intervals."""
        if not self.seen:
            return None, [None] * len(windows)
        whole = _Merged()
        if not windows:
            for k in in_order(self.starts):
                whole.add(self.starts[k], self.ends[k], self.kinds[k])
            return whole.partition(), []
        owner = self._owners(windows)
        mine = [_Merged() for _ in windows]
        starts, ends, kinds = self.starts, self.ends, self.kinds
        for k in in_order(starts):
            i = owner[k]
            if i >= 0:
                start, end, kind = starts[k], ends[k], kinds[k]
                whole.add(start, end, kind)
                mine[i].add(start, end, kind)
        return whole.partition(), [m.partition() for m in mine]

    def _owners(self, windows: list[tuple[float, float]]) -> array:
        """Each item's iteration (its index in ``windows``; -1: no iteration launched it): the launches are
        read back once, each looked up among the items by correlation id (a replayed graph's kernels
        share their launch's), so only the items are held, never every launch."""
        ids = self.ids
        by_id = array("i", in_order(ids))  # the items in correlation id order
        sorted_ids = array("q", (ids[k] for k in by_id))
        starts = [w[0] for w in windows]
        ends = [w[1] for w in windows]
        owner = array("i", [-1]) * len(ids)
        for correlation, launched in self.launches.rows():
            j = bisect_left(sorted_ids, correlation)
            if j == len(sorted_ids) or sorted_ids[j] != correlation:
                continue  # a launch whose work the trace did not keep
            i = bisect_right(starts, launched) - 1
            if i < 0 or launched > ends[i]:
                continue
            while j < len(sorted_ids) and sorted_ids[j] == correlation:
                owner[by_id[j]] = i
                j += 1
        return owner


MAX_RUNS = 4096  # beyond this many ascending runs, a plain sort


def in_order(values: array) -> Iterator[int]:
    """The indices of ``values`` in ascending order of their values, without a list of every index where
    the values come in few ascending runs, as a trace's do (each stream's kernels in start order, each
    thread's launches in id order): the runs merged as they are read."""
    n = len(values)
    bounds = [0, *(k for k in range(1, n) if values[k] < values[k - 1]), n]
    if len(bounds) - 1 > MAX_RUNS:
        return iter(sorted(range(n), key=values.__getitem__))
    if len(bounds) == 2:
        return iter(range(n))
    return heapq.merge(*(range(a, b) for a, b in zip(bounds, bounds[1:])), key=values.__getitem__)


class _Merged:
    """One window's items, given in start order, as each class's merged intervals: flat arrays of
    (start, end) pairs, a few bytes an interval, not objects; and the window's first start, last end."""

    __slots__ = ("merged", "first", "last")

    def __init__(self) -> None:
        self.merged = (array("d"), array("d"), array("d"))  # COMPUTE, COMMUNICATION, MEMCPY
        self.first: float | None = None
        self.last: float | None = None

    def add(self, start: float, end: float, kind: int) -> None:
        if self.first is None:
            self.first = start
        if self.last is None or end > self.last:
            self.last = end
        into = self.merged[kind]
        if into and start <= into[-1]:
            if end > into[-1]:
                into[-1] = end
        else:
            into.append(start)
            into.append(end)

    def partition(self) -> dict[str, float] | None:
        """The window split into compute, exposed communication, exposed memcpy and idle, with each class's
        total beside; microseconds. None: no item."""
        if self.first is None:
            return None
        compute, communication, memcpy = self.merged
        compute_us, communication_us, memcpy_us = _length(compute), _length(communication), _length(memcpy)
        exposed_communication = communication_us - _overlap(communication, compute)
        exposed_memcpy = memcpy_us - _overlap(memcpy, _union(compute, communication))
        window = self.last - self.first
        idle = max(0.0, window - compute_us - exposed_communication - exposed_memcpy)
        return {"window": window, "compute": compute_us, "exposed_communication": exposed_communication,
                "exposed_memcpy": exposed_memcpy, "idle": idle, "communication": communication_us,
                "memcpy": memcpy_us}


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
    out: dict[str, Any] = {field: round(us[field[:-3]] / 1000.0, 3) for field in FIELDS}
    out["communication_overlap_pct"] = (round(100.0 * (1 - us["exposed_communication"] / us["communication"]), 1)
                                        if us["communication"] else None)
    return out


def _length(pairs: array) -> float:
    # pair by pair: the traces' absolute microseconds (~1e15) summed first would lose milliseconds
    return sum(pairs[k + 1] - pairs[k] for k in range(0, len(pairs), 2))


def _overlap(a: array, b: array) -> float:
    """The length two flat arrays of disjoint (start, end) pairs, in order, share."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        start, end = max(a[i], b[j]), min(a[i + 1], b[j + 1])
        if end > start:
            total += end - start
        if a[i + 1] < b[j + 1]:
            i += 2
        else:
            j += 2
    return total


def _union(a: array, b: array) -> array:
    """Two flat arrays of disjoint (start, end) pairs, in order, merged into one."""
    out = array("d")
    i = j = 0
    while i < len(a) or j < len(b):
        if j >= len(b) or (i < len(a) and a[i] <= b[j]):
            start, end = a[i], a[i + 1]
            i += 2
        else:
            start, end = b[j], b[j + 1]
            j += 2
        if out and start <= out[-1]:
            if end > out[-1]:
                out[-1] = end
        else:
            out.append(start)
            out.append(end)
    return out
