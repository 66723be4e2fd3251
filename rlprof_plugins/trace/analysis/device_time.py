"""Device time as a partition of a rank's recorded iterations: compute, exposed communication, exposed memcpy,
idle, and the time between iterations.

The device work of an iteration is the work its host side launched: a
kernel, copy or memset belongs to the iteration its launching runtime call
(``cudaLaunchKernel``, ``hipLaunchKernel``, ``cudaMemcpyAsync`` ...), found by
correlation id, started in; a replayed CUDA or HIP graph's kernels carry the
``cudaGraphLaunch``/``hipGraphLaunch``'s id, so they belong to the iteration
that replayed the graph. Work nothing in an iteration launched (warm-up,
another session's tail) is left out.

An iteration's window is its first item's start to its last item's end, and it
is split the way HolisticTraceAnalysis's temporal breakdown and TraceLens's GPU
timeline split a window, over the intervals merged across every stream:

- **compute**: the merged intervals of computation kernels;
- **exposed communication**: the merged intervals of communication kernels
  (NCCL, RCCL, HCCL, the engines' custom all-reduce, DeepEP ...: the table in
  ``communication``) that no compute covers;
- **exposed memcpy**: the merged intervals of copies and memsets that
  neither covers;
- **idle**: the rest of the window.

A rank's window runs from its first iteration item's start to its last one's
end. Its parts are the sums of its iterations' parts, and the device time in
no iteration's window (parked, waiting for requests, the host between two
iterations) is ``between_iterations``: the five add up to the rank's window.
Where iterations overlap (asynchronous scheduling, several streams), each
stretch of time goes to one iteration (``_Sweep``), so no kernel counts twice
and another iteration's kernels are never one's idle. The totals
(``communication_ms``, ``memcpy_ms``: each class's merged intervals, covered
or not) stay beside them, and so does the share of communication that compute
hid (``communication_overlap_pct``). HTA's idle over a rank's kernel window is
``idle + between_iterations``.

A trace with no iteration at all (a user's trace without ``ProfilerStep``
ranges) has its whole device timeline as one window: there is nothing else
to restrict it to.

Memory: during the pass, flat arrays of the device items (25 bytes an
item) and of the launches (16 bytes a launch, a chunk at a time: ``spill``);
at the end, each item's iteration and its place in correlation order (16
bytes an item), and six sums an iteration. The items are walked in start order without sorting them:
a trace lists each stream's kernels in start order, so the few ascending
runs are merged as they are read (``in_order``).
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left, bisect_right
from typing import Any, Iterator

from .spill import SpilledColumns
from .communication import is_communication
from .time_split import MEMORY_CATS

# Kineto's categories of host calls that launch device work: CUDA's and HIP's runtime (ROCm's Kineto files
# its HIP calls under the same category), and the driver API (cuLaunchKernel)
LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver"})
COMPUTE, COMMUNICATION, MEMCPY = 0, 1, 2
FIELDS = ("window_ms", "compute_ms", "exposed_communication_ms", "exposed_memcpy_ms", "idle_ms",
          "between_iterations_ms", "communication_ms", "memcpy_ms")


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
        """The rank's partition of the device work the iterations launched, and each iteration's
        (``windows``: each iteration's host start and end, in start order). Every instant of the rank's
        device window goes to one part of one iteration, or to ``between_iterations``: the rank's parts
        are its iterations' sums, each kernel counted once where iterations overlap. Without windows:
        every item, one iteration."""
        if not self.seen:
            return None, [None] * len(windows)
        owner = self._owners(windows) if windows else array("i", [0]) * len(self.starts)
        split = _Sweep(max(len(windows), 1))
        split.run(in_order(self.starts), self.starts, self.ends, self.kinds, owner)
        mine = split.partitions()
        if split.first is None:
            return None, mine if windows else []
        whole: dict[str, float] = {key: 0.0 for key in PARTS}
        for part in mine:
            if part is not None:
                for key in PARTS:
                    whole[key] += part[key]
        whole["between_iterations"] = split.between
        whole["window"] = split.last - split.first
        return whole, mine if windows else []

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


COMPUTE_US, EXPOSED_COMMUNICATION_US, EXPOSED_MEMCPY_US, IDLE_US, COMMUNICATION_US, MEMCPY_US = range(6)
PARTS = ("window", "compute", "exposed_communication", "exposed_memcpy", "idle", "communication", "memcpy")


class _Sweep:
    """The device window walked once in time order, each stretch of it given to one part of one iteration.

    A stretch where compute runs is compute, of the earliest iteration whose compute runs there; else
    where communication runs, exposed communication, of the earliest iteration whose communication runs;
    else copies, exposed memcpy; else idle, of the earliest iteration whose window (its first item's start
    to its last item's end) holds it, or between the iterations where none does. Each class's total
    (communication hidden under compute or not) goes to the earliest iteration running it. Without overlap
    each iteration's parts are its own window's merged intervals, as HTA and TraceLens split one window.
    Memory: the items running at once (a few streams' worth) and six sums an iteration."""

    def __init__(self, iterations: int) -> None:
        self.sums = array("d", [0.0]) * (6 * iterations)
        self.seen = bytearray(iterations)
        self.between = 0.0
        self.first: float | None = None
        self.last: float | None = None

    def run(self, order: Iterator[int], starts: array, ends: array, kinds: array, owner: array) -> None:
        last_end = array("d", [float("-inf")]) * len(self.seen)  # each iteration's window end
        for k in range(len(owner)):
            if owner[k] >= 0 and ends[k] > last_end[owner[k]]:
                last_end[owner[k]] = ends[k]
        running: tuple[dict[int, int], ...] = ({}, {}, {})  # per class: iteration -> items of it running
        windows: dict[int, float] = {}  # the iterations whose window is open: its end
        heap: list[tuple[float, int, int]] = []  # the running items' (end, class, iteration)
        now = None
        for k in order:
            mine = owner[k]
            if mine < 0:
                continue
            start = starts[k]
            while heap and heap[0][0] <= start:
                end, kind, of = heapq.heappop(heap)
                self._give(now, end, running, windows)
                now = end
                left = running[kind][of] - 1
                if left:
                    running[kind][of] = left
                else:
                    del running[kind][of]
            if now is None:
                now = self.first = start
            elif start > now:
                self._give(now, start, running, windows)
                now = start
            if not self.seen[mine]:
                self.seen[mine] = 1
                windows[mine] = last_end[mine]
            kind = kinds[k]
            running[kind][mine] = running[kind].get(mine, 0) + 1
            heapq.heappush(heap, (ends[k], kind, mine))
        while heap:
            end, kind, of = heapq.heappop(heap)
            self._give(now, end, running, windows)
            now = max(now, end)
            left = running[kind][of] - 1
            if left:
                running[kind][of] = left
            else:
                del running[kind][of]
        self.last = now

    def _give(self, start: float | None, end: float, running: tuple[dict[int, int], ...],
              windows: dict[int, float]) -> None:
        """The stretch from ``start`` to ``end``, in which nothing starts or ends, to its part and iteration."""
        if start is None or end <= start:
            return
        length, sums = end - start, self.sums
        compute, communication, memcpy = running
        if compute:
            sums[6 * min(compute) + COMPUTE_US] += length
        if communication:
            of = 6 * min(communication)
            sums[of + COMMUNICATION_US] += length
            if not compute:
                sums[of + EXPOSED_COMMUNICATION_US] += length
        if memcpy:
            of = 6 * min(memcpy)
            sums[of + MEMCPY_US] += length
            if not compute and not communication:
                sums[of + EXPOSED_MEMCPY_US] += length
        if compute or communication or memcpy:
            return
        for closed in [i for i, last in windows.items() if last <= start]:
            del windows[closed]
        if windows:
            sums[6 * min(windows) + IDLE_US] += length
        else:
            self.between += length

    def partitions(self) -> list[dict[str, float] | None]:
        """Each iteration's parts (us), its window their sum; None: it launched no device item."""
        out: list[dict[str, float] | None] = []
        for i, seen in enumerate(self.seen):
            if not seen:
                out.append(None)
                continue
            sums = self.sums[6 * i:6 * i + 6]
            out.append({"window": sums[COMPUTE_US] + sums[EXPOSED_COMMUNICATION_US] + sums[EXPOSED_MEMCPY_US]
                        + sums[IDLE_US], "compute": sums[COMPUTE_US],
                        "exposed_communication": sums[EXPOSED_COMMUNICATION_US],
                        "exposed_memcpy": sums[EXPOSED_MEMCPY_US], "idle": sums[IDLE_US],
                        "communication": sums[COMMUNICATION_US], "memcpy": sums[MEMCPY_US]})
        return out


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
    out: dict[str, Any] = {field: round(us[field[:-3]] / 1000.0, 3) for field in FIELDS if field[:-3] in us}
    out["communication_overlap_pct"] = (round(100.0 * (1 - us["exposed_communication"] / us["communication"]), 1)
                                        if us["communication"] else None)
    return out
