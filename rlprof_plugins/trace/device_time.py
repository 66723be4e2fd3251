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

Memory: during the pass, flat arrays (about 16 bytes a launch, 25 a device
item); at the end, each item's iteration and the items in start order
(about 45 bytes an item), and the merged intervals as flat arrays.
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


def _is_id(correlation: Any) -> bool:
    """A correlation id the arrays hold (CUPTI's count up from 1; anything else: no id)."""
    return isinstance(correlation, int) and 0 <= correlation < 1 << 63


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
        if _is_id(correlation):
            self.launch_ids.append(correlation)
            self.launch_ts.append(ts)

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
        iteration's host start and end, in start order). Without windows: every item, one window."""
        if not self.seen:
            return None, [None] * len(windows)
        if not windows:
            return _partition(self, sorted(range(len(self.starts)), key=self.starts.__getitem__)), []
        owner = self._owners(windows)
        order = sorted((k for k in range(len(owner)) if owner[k] >= 0), key=self.starts.__getitem__)
        mine = [array("l") for _ in windows]  # each iteration's items, in start order
        for k in order:
            mine[owner[k]].append(k)
        return _partition(self, order), [_partition(self, items) for items in mine]

    def _owners(self, windows: list[tuple[float, float]]) -> array:
        """Each item's iteration (its index in ``windows``; -1: no iteration launched it)."""
        ids, ts = self.launch_ids, self.launch_ts
        if any(ids[k] > ids[k + 1] for k in range(len(ids) - 1)):  # correlation ids rise with launches, mostly
            order = sorted(range(len(ids)), key=ids.__getitem__)
            ids, ts = array("q", (ids[k] for k in order)), array("d", (ts[k] for k in order))
        starts = [w[0] for w in windows]
        ends = [w[1] for w in windows]
        owner = array("l", [-1]) * len(self.ids)
        for k, correlation in enumerate(self.ids):
            if correlation < 0:
                continue
            j = bisect_left(ids, correlation)
            if j == len(ids) or ids[j] != correlation:
                continue  # launched before the trace began, or by nothing the trace kept
            launched = ts[j]
            i = bisect_right(starts, launched) - 1
            if i >= 0 and launched <= ends[i]:
                owner[k] = i
        return owner


def _partition(work: DeviceWork, order: Iterable[int]) -> dict[str, float] | None:
    """The window of the items ``order`` names (in start order) split into compute, exposed communication,
    exposed memcpy and idle, with each class's total beside; microseconds. None: no item. Each class's
    intervals are merged into a flat array of (start, end) pairs: a few bytes an interval, not objects."""
    starts, ends, kinds = work.starts, work.ends, work.kinds
    merged = (array("d"), array("d"), array("d"))
    first = last = None
    for k in order:
        start, end = starts[k], ends[k]
        if first is None:
            first = start
        if last is None or end > last:
            last = end
        into = merged[kinds[k]]
        if into and start <= into[-1]:
            if end > into[-1]:
                into[-1] = end
        else:
            into.append(start)
            into.append(end)
    if first is None:
        return None
    compute, communication, memcpy = merged
    compute_us, communication_us, memcpy_us = _length(compute), _length(communication), _length(memcpy)
    exposed_communication = communication_us - _overlap(communication, compute)
    exposed_memcpy = memcpy_us - _overlap(memcpy, _union(compute, communication))
    window = last - first
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
