"""Where a trace's operator and device time went, accumulated as events stream in.

``SelfTimes``: the self time of nested CPU operators (an operator's time
minus its nested operators'), so nested ops are not counted twice.
``DeviceTime``: device work split into compute, communication (collective
kernels: NCCL, HCCL, all-reduce ...) and memory copies, and each device
stream's busy time and span, whose difference is the stream's idle time (as
HolisticTraceAnalysis counts it: per stream, not per device).

Both keep memory flat: the open nesting per thread, a few numbers per stream.
"""

from __future__ import annotations

from typing import Any, Callable

from .align import COLLECTIVE

MEMORY_CATS = frozenset({"gpu_memcpy", "gpu_memset"})
DEVICE_CLASSES = ("compute", "communication", "memcpy")


def is_communication(name: str) -> bool:
    """A collective by its name: NCCL/HCCL kernels, ``c10d::``/``gloo:`` all-reduce ops, vLLM's shm all-reduce."""
    return COLLECTIVE.search(name) is not None


class SelfTimes:
    """Self time of nested complete events, one thread at a time, as they
    stream in (memory: the open nesting per thread, not the operators seen).

    Kineto writes a thread's operators in start order; one that starts
    before the thread's previous one is counted with its whole duration
    (``out_of_order``) rather than buffered, so memory stays flat."""

    def __init__(self, into: dict[str, float], placed: Callable[[str, float, float], None] | None = None) -> None:
        self._into = into
        self._placed = placed  # also told (name, start, self time) of each operator, when given
        self._stacks: dict[Any, list[list]] = {}  # thread -> [end, name, time of children, own duration, start]
        self._last: dict[Any, float] = {}
        self.out_of_order = 0

    def add(self, thread: Any, start: float, end: float, name: str) -> None:
        stack = self._stacks.get(thread)
        if stack is None:
            stack = self._stacks[thread] = []
        if start < self._last.get(thread, start):
            self.out_of_order += 1
            self._done(name, start, end - start)
            return
        self._last[thread] = start
        while stack and stack[-1][0] <= start:
            self._pop(stack)
        if stack:
            stack[-1][2] += end - start
        stack.append([end, name, 0.0, end - start, start])

    def _pop(self, stack: list[list]) -> None:
        _, name, children, own, start = stack.pop()
        self._done(name, start, max(0.0, own - children))

    def _done(self, name: str, start: float, us: float) -> None:
        self._into[name] += us
        if self._placed is not None:
            self._placed(name, start, us)

    def close(self) -> None:
        for stack in self._stacks.values():
            while stack:
                self._pop(stack)


class DeviceTime:
    """Device kernels and copies by class, and per stream busy time and span."""

    def __init__(self) -> None:
        self.by_class: dict[str, float] = {c: 0.0 for c in DEVICE_CLASSES}  # us
        self._streams: dict[Any, list[float]] = {}  # (pid, tid) -> [busy us, first start, last end]

    def add(self, stream: Any, cat: str, name: str, start: float, dur: float) -> None:
        kind = "memcpy" if cat in MEMORY_CATS else "communication" if is_communication(name) else "compute"
        self.by_class[kind] += dur
        s = self._streams.get(stream)
        if s is None:
            self._streams[stream] = [dur, start, start + dur]
        else:
            s[0] += dur
            s[1] = min(s[1], start)
            s[2] = max(s[2], start + dur)

    @property
    def seen(self) -> bool:
        return bool(self._streams)

    @property
    def idle_us(self) -> float:
        """The busiest stream's idle time: its span less its busy time (0 without device events)."""
        if not self._streams:
            return 0.0
        busy, first, last = max(self._streams.values(), key=lambda s: s[0])
        return max(0.0, (last - first) - busy)
