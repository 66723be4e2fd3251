"""The nodes' plans of ROOT merged into one view.

A file several nodes hold at one size (a shared filesystem) is read once; at different sizes, as the
first node holds it, and named. A server several nodes hold is one server: its step folders and step
logs joined. A step folder the nodes hold differently (each node writing its own ranks) is joined too:
each merge group lacks only the ranks no node holds.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ....store.manifest import ACTIVE, TERMINAL, aggregate_state
from ....store.step_files import missing_joined
from ....trace.format import naming
from ....trace.format.rank_files import missing_text
from ...plan.measured_rows import scratch_steps
from ...plan.planner import choose
from ...plan.view import GroupView, RootView, ServerView, StepView


class NodeViews:
    """The nodes' plans merged (``node.plan_here``, unpacked): which nodes hold each file a pass reads
    (``holders``, ``sizes``), and one view of ROOT (``view``)."""

    def __init__(self) -> None:
        self.holders: dict[str, list[str]] = {}  # a file a pass reads (below ROOT) -> the nodes holding it
        self.sizes: dict[str, int] = {}
        self.notes: list[str] = []
        self._servers: dict[str, ServerView] = {}  # by ``rel``; ``measured`` its step logs' records, joined

    def add(self, node: str, planned: Any) -> None:
        """A node's plan; ``ValueError`` for one not in this release's shape (a node of another release)."""
        if not isinstance(planned, dict) or not all(isinstance(s, ServerView) for s in planned.get("servers", [None])):
            raise ValueError("its plan is not in this release's shape")
        self.notes += [f"node {node}: {line}" for line in planned["skipped"]]
        for rel, size in planned["sizes"].items():
            if self.sizes.setdefault(rel, size) == size:
                self.holders.setdefault(rel, []).append(node)
            else:
                self.notes.append(f"{rel}: differs between nodes ({', '.join(self.holders[rel])}: "
                                  f"{self.sizes[rel]:,} bytes; {node}: {size:,} bytes); read the first")
        for server in planned["servers"]:  # a server another node holds too: joined into the first's
            if (held := self._servers.setdefault(server.rel, server)) is not server:
                _join_servers(held, server)

    def view(self, shown: str, replica: str | None, steps: tuple[int, int] | None, every_folder: bool) -> RootView:
        """ROOT's view (``plan.planner.plan_root``'s answer) over every node's plan."""
        servers, taken = [], set()
        for held in (self._servers[rel] for rel in sorted(self._servers)):
            server = replace(held, name=held.name if held.name not in taken else f"{held.name}@{held.rel}",
                             measured=scratch_steps(held.measured))
            taken.add(server.name)
            servers.append(server)
        chosen = choose(servers, replica, shown)
        view = RootView(shown, chosen or [ServerView("", "", [], {}, scratch_steps({}), [], {}, [])],
                        [s.name for s in servers], fleet=len(chosen) > 1)
        for server in view.servers:
            server.steps_range = steps
            server.settle(every_folder)
        return view


def _join_servers(held: ServerView, other: ServerView) -> None:
    folders = {f.rel: f for f in held.folders}
    for f in other.folders:
        if f.rel not in folders:
            held.folders.append(f)
        else:  # a trace on any node makes it a traced step
            mine = folders[f.rel]
            mine.has_files, mine.only_flight = mine.has_files or f.has_files, mine.only_flight and f.only_flight
    for rel, step in other.planned.items():
        held.planned[rel] = step if rel not in held.planned else join_steps(held.planned[rel], step)
    for step, found in other.anomalies.items():
        paths = {a.data["path"] for a in held.anomalies.get(step, [])}
        held.anomalies.setdefault(step, []).extend(a for a in found if a.data["path"] not in paths)
    periods = {repr(p.to_json()) for p in held.periods}
    held.periods += [p for p in other.periods if repr(p.to_json()) not in periods]
    held.warnings += [w for w in other.warnings if w not in held.warnings]
    for step, ranks in other.measured.items():
        for rank, record in ranks.items():
            held.measured.setdefault(step, {}).setdefault(rank, record)


def join_steps(a: StepView, b: StepView) -> StepView:
    """One step folder as two nodes hold it, read as one folder holding both nodes' files: each merge group's
    ranks joined, the ranks neither holds still missing; a file both hold is the first node's."""
    if a == b:
        return a
    groups = {(g.group, g.stage): g for g in a.groups}
    for g in b.groups:
        groups[(g.group, g.stage)] = _join_groups(groups[(g.group, g.stage)], g) if (g.group, g.stage) in groups else g
    jobs = {str(job.path) for g in groups.values() for job in g.jobs}
    states = [s for s in (a.state, b.state) if s in ACTIVE + TERMINAL]
    files = _union([*a.files, *b.files], lambda f: f["path"])
    traces = sorted((f for f in files if f["role"] != "memory"), key=lambda f: Path(f["path"]).parts)
    return StepView(
        a.step, a.rel, aggregate_state(states) if a.state != b.state and states else a.state,
        {k: b.manifest.get(k) if a.manifest.get(k) is None else a.manifest[k] for k in {**a.manifest, **b.manifest}},
        "; ".join(_union([e for e in (a.error, b.error) if e], str)) or None,
        sorted(groups.values(), key=lambda g: (g.group, g.stage is not None, g.stage or "")),
        [u for u in _union([*a.unplaced, *b.unplaced], lambda u: u[0]) if u[0] not in jobs],
        _union([*a.assumed, *b.assumed], str), traces + sorted((f for f in files if f["role"] == "memory"),
                                                               key=lambda f: f["path"]),
        sum(f["bytes"] for f in traces), sorted(_union([*a.memory, *b.memory], lambda m: m[1]), key=lambda m: m[1]),
        a.has_files or b.has_files, a.read and b.read)


def _join_groups(a: GroupView, b: GroupView) -> GroupView:
    jobs = sorted(_union([*a.jobs, *b.jobs], lambda job: job.rank), key=lambda job: _rank_order(job.rank))
    missing = missing_joined([job.rank for job in jobs], [*a.missing, *b.missing])
    return GroupView(a.stage, jobs, missing, missing_text(len(jobs), missing), a.group)


def _rank_order(label: str) -> tuple:
    parsed = naming.parse_rank_label(label)
    return (0, naming.rank_order(*parsed), label) if parsed else (1, (), label)


def _union(items: list, key) -> list:
    """``items`` in order, each key once (the first)."""
    first: dict[Any, Any] = {}
    for item in items:
        first.setdefault(key(item), item)
    return list(first.values())
