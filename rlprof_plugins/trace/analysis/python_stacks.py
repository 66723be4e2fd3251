"""Python frames of a trace, per stage: each function's self and total time, and the call tree.

Two sources, one view: torch's exact Python events (``python_function``, an event per call)
and rlprof's sampled stacks (``python_sample``: ``backends.stack_sampler``, a span per frame
seen in consecutive samples). Both nest on their thread, as complete events in start order,
so one pass reads either. Only the threads that run the engine's iterations count (torch's
exact stacks record every thread).

A frame's time is split among the iterations it overlaps (an engine loop's frame spans many):
its ``total`` is the time it was on the stack (a recursive call counted once), its ``self`` the
time it was the innermost frame; time outside every iteration counts as ``step_numbers.BETWEEN``.
A sampled frame's time is what its samples stand for (``sampled_us`` in its ``args``: each
sample the time since the previous one on its thread), not its span's duration: samples are
unbiased where the span's edges are not (a span begins at the first sample that saw it).
The call tree per stage (``tree``) holds each call path's total, the paths under
``TREE_MIN_SHARE`` of the stage's time left out, so an exact trace's millions of calls make a
tree of hundreds of nodes.

Events are kept for the pass in spilled columns (``spill``, 24 bytes an event, a chunk at a time)
and read once the iterations are known (a trace may list them last).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from typing import Any

from .spill import SpilledColumns
from .step_numbers import BETWEEN

EXACT_CAT = "python_function"  # torch's Python tracer (``with_stack``)
SAMPLE_CAT = "python_sample"  # rlprof's sampled stacks (``backends.stack_sampler``)
PYTHON_CATS = frozenset({EXACT_CAT, SAMPLE_CAT})
MODES = {EXACT_CAT: "exact", SAMPLE_CAT: "sampled"}
TREE_MIN_SHARE = 0.005  # call paths under 0.5% of their stage's time are left out of the tree
TREE_MAX_DEPTH = 48


class PythonFrames:
    """The Python events of one trace, kept during the pass (``add``), read at its end (``by_stage``)."""

    def __init__(self) -> None:
        self.kept = SpilledColumns("d", "d", "i", "i", "d", "i")
        self.starts, self.ends, self.names, self.threads, self.weights, self.depths = self.kept.columns
        self._ids: dict[str, int] = {}
        self.by_id: list[str] = []
        self._thread_ids: dict[Any, int] = {}
        self.thread_keys: list[Any] = []
        self.modes: set[str] = set()

    def add(self, cat: str, thread: Any, start: float, end: float, name: str, sampled_us: float = -1.0,
            depth: int = -1) -> None:
        """One event; a sampled span's ``sampled_us`` (the time its samples stand for) counts
        instead of its duration, and its ``depth`` (its place in the stack) nests it, not its times
        (rounded to the nanosecond, a span ending where the next begins would read as its parent)."""
        i = self._ids.get(name)
        if i is None:
            i = self._ids[name] = len(self.by_id)
            self.by_id.append(name)
            self.modes.add(MODES[cat])
        t = self._thread_ids.get(thread)
        if t is None:
            t = self._thread_ids[thread] = len(self.thread_keys)
            self.thread_keys.append(thread)
        self.starts.append(start)
        self.ends.append(end)
        self.names.append(i)
        self.threads.append(t)
        self.weights.append(sampled_us)
        self.depths.append(depth)
        if len(self.names) >= self.kept.chunk:
            self.kept.added()

    @property
    def mode(self) -> str | None:
        """``exact``, ``sampled`` (both: ``exact``, the finer), or None without Python events."""
        return "exact" if "exact" in self.modes else "sampled" if self.modes else None

    def by_stage(self, windows: list[tuple[float, float, str]], threads: set) -> dict[str, dict[str, Any]]:
        """``{stage: {"self": {name: us}, "total": {name: us}, "tree": node}}`` over the events of
        ``threads`` (those that ran the iterations; empty: every thread), with ``windows`` the
        iterations' (start, end, stage) in start order."""
        if not self.by_id:
            return {}
        keep = {t for t, key in enumerate(self.thread_keys) if not threads or key in threads}
        starts = [w[0] for w in windows]
        ends = [w[1] for w in windows]
        labels = [w[2] for w in windows]
        self_us: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
        total_us: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
        trees: dict[str, dict[tuple, float]] = defaultdict(lambda: defaultdict(float))
        stacks: dict[int, list[list]] = {}  # thread -> [end, name, path, {stage: us} own, {stage: us} children]

        def spread(start: float, end: float) -> dict[str, float]:
            """The time of [start, end) per stage: the iterations it overlaps, the rest BETWEEN."""
            out: dict[str, float] = {}
            inside = 0.0
            j = max(bisect_right(starts, start) - 1, 0)
            while j < len(starts) and starts[j] < end:
                lo, hi = max(start, starts[j]), min(end, ends[j])
                if hi > lo:
                    out[labels[j]] = out.get(labels[j], 0.0) + (hi - lo)
                    inside += hi - lo
                j += 1
            if end - start > inside:
                out[BETWEEN] = out.get(BETWEEN, 0.0) + (end - start - inside)
            return out

        def stage_at(t: float) -> str:
            j = bisect_right(starts, t) - 1
            return labels[j] if j >= 0 and t < ends[j] else BETWEEN

        def pop(stack: list[list]) -> None:
            _, name, path, own, children = stack.pop()
            for stage, us in own.items():
                rest = us - children.get(stage, 0.0)
                if rest > 0:
                    self_us[stage][name] += rest
                if name not in path[:-1]:  # a recursive call's time is its outermost call's
                    total_us[stage][name] += us
                if len(path) <= TREE_MAX_DEPTH:
                    trees[stage][path] += us
            if stack:
                parent = stack[-1][4]
                for stage, us in own.items():
                    parent[stage] = parent.get(stage, 0.0) + us

        for start, end, name, thread, sampled, depth in self.kept.rows():
            if thread not in keep:
                continue
            stack = stacks.get(thread)
            if stack is None:
                stack = stacks[thread] = []
            if depth >= 0:
                while len(stack) > depth:
                    pop(stack)
            while stack and stack[-1][0] <= start and depth < 0:
                pop(stack)
            if stack and end > stack[-1][0]:  # not nested in the open frame (clock rounding): clipped to it
                end = stack[-1][0]
            if end <= start:
                continue
            path = (stack[-1][2] if stack else ()) + (name,)
            # a sampled span counts its samples, in its outermost frame's iteration (the sampler splits spans
            # where iterations change, so a stack's frames share one)
            if sampled < 0:
                own = spread(start, end)
            else:
                own = {next(iter(stack[-1][3])) if stack and stack[-1][3] else stage_at(start): sampled}
            stack.append([end, name, path, own, {}])
        for stack in stacks.values():
            while stack:
                pop(stack)
        names = self.by_id
        out: dict[str, dict[str, Any]] = {}
        for stage in set(self_us) | set(total_us):
            out[stage] = {"self": {names[n]: us for n, us in self_us[stage].items()},
                          "total": {names[n]: us for n, us in total_us[stage].items()},
                          "tree": _tree(trees[stage], names)}
        return out


def _tree(paths: dict[tuple, float], names: list[str]) -> dict[str, Any]:
    """The call paths as a tree ``{"name", "us", "children": [...]}``, heaviest first, paths under
    ``TREE_MIN_SHARE`` of the stage's time left out."""
    whole = sum(us for path, us in paths.items() if len(path) == 1)
    root: dict[str, Any] = {"name": "all", "us": whole, "children": []}
    if whole <= 0:
        return root
    nodes: dict[tuple, dict[str, Any]] = {(): root}
    for path in sorted(paths, key=len):
        us = paths[path]
        parent = nodes.get(path[:-1])
        if parent is None or us < TREE_MIN_SHARE * whole:
            continue
        node = {"name": names[path[-1]], "us": us, "children": []}
        parent["children"].append(node)
        nodes[path] = node
    stack = [root]
    while stack:
        node = stack.pop()
        node["children"].sort(key=lambda c: -c["us"])
        stack.extend(node["children"])
    return root


def merged(parts: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Several traces' ``by_stage`` (a step's ranks) as one: times added, trees joined by path."""
    out: dict[str, dict[str, Any]] = {}
    for part in parts:
        for stage, numbers in part.items():
            into = out.setdefault(stage, {"self": defaultdict(float), "total": defaultdict(float),
                                          "tree": {"name": "all", "us": 0.0, "children": []}})
            for kind in ("self", "total"):
                for name, us in numbers[kind].items():
                    into[kind][name] += us
            _join(into["tree"], numbers["tree"])
    return {stage: {"self": dict(n["self"]), "total": dict(n["total"]), "tree": n["tree"]} for stage, n in out.items()}


def _join(into: dict[str, Any], node: dict[str, Any]) -> None:
    into["us"] += node["us"]
    by_name = {c["name"]: c for c in into["children"]}
    for child in node["children"]:
        mine = by_name.get(child["name"])
        if mine is None:
            mine = by_name[child["name"]] = {"name": child["name"], "us": 0.0, "children": []}
            into["children"].append(mine)
        _join(mine, child)
    into["children"].sort(key=lambda c: -c["us"])
