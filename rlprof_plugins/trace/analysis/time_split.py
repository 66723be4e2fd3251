"""Where a trace's operator time went, accumulated as events stream in; which device items are copies.

``SelfTimes``: the self time of nested CPU operators (an operator's time
minus its nested operators'), so nested ops are not counted twice; memory
stays flat: the open nesting per thread. The device side's split (compute,
communication, memcpy, idle) is ``device_time``; which work is communication,
``communication``.
"""

from __future__ import annotations

from typing import Any, Callable

MEMORY_CATS = frozenset({"gpu_memcpy", "gpu_memset"})


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
