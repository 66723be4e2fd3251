"""What the planner found below ROOT: every server, each step's files and small files read, as typed records.

The renderer makes the report from a ``RootView`` and the passes' results
alone: it opens no file. Paths are relative to ROOT (``rel``), so a view
reads the same made on this machine or merged from the nodes that hold the
files; ``RootView.shown`` joins one to ROOT as the user wrote it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...metrics.requests import BusyPeriod
from ...trace.analysis.trace_stats import TraceJob


@dataclass
class GroupView:
    """One merge group of a step (a session and stage): its worker traces' passes and the ranks it lacks."""

    stage: str | None
    jobs: list[TraceJob]
    missing: list[str] = field(default_factory=list)
    missing_line: str | None = None  # ``rank_files.missing_line``: the lacking ranks in one line
    group: str = ""  # the session it belongs to, where a folder holds several (``MergeGroup.group``)


@dataclass
class AnomalyView:
    """One flight recorder dump: its ``anomaly.json`` (``path``: the dump's folder below ROOT) and the passes
    of its window's traces."""

    data: dict[str, Any]
    jobs: list[TraceJob]


@dataclass
class StepView:
    """One step folder (``rel`` below ROOT) as its manifest and its file names describe it."""

    step: int | None
    rel: str
    state: str
    manifest: dict[str, Any]  # ``engine``, ``engine_version``, ``by_stage`` and ``server`` where it says them
    error: str | None  # why the step failed (its writers' errors) or why its folder could not be read
    groups: list[GroupView]
    unplaced: list[tuple[str, str, str | None]]  # (path below ROOT, why, role)
    assumed: list[str]
    files: list[dict[str, Any]]  # each trace and memory snapshot: path below the step folder, bytes, role, rank
    trace_bytes: int
    memory: list[tuple[str, str]]  # (rank, path below ROOT) of each memory snapshot
    has_files: bool  # a trace or a memory snapshot: a root with neither is no step
    read: bool = True  # False: the folder itself could not be read (``error`` says why)

    @property
    def jobs(self) -> list[TraceJob]:
        return [job for g in self.groups for job in g.jobs]


@dataclass
class Folder:
    """A step folder of a server as first seen: whether it holds a trace or a memory snapshot, and whether only
    the flight recorder wrote it (a step measured, not traced, where its step logs measured it)."""

    step: int | None
    rel: str
    has_files: bool
    only_flight: bool


@dataclass
class ServerView:
    """One server (replica) below ROOT: its step folders, the chosen ones planned, its measured steps, what
    its frontends kept and its flight recorder dumps; ``settle`` then says which steps the report shows."""

    name: str
    rel: str
    folders: list[Folder]
    planned: dict[str, StepView]  # the chosen steps' folders (``--steps``), by ``rel``
    # ``measured_rows.MeasuredSteps``: each measured step's numbers; in a Ray node's plan, its step logs'
    # records (``{step: {rank: StepRecord}}``), made into numbers where every node's ranks are joined
    measured: Any
    periods: list[BusyPeriod]
    anomalies: dict[int, list[AnomalyView]]
    warnings: list[str]
    steps_range: tuple[int, int] | None = None  # ``--steps``
    steps_found: list[int | None] = field(default_factory=list)
    steps: list[StepView] = field(default_factory=list)  # the chosen steps' folders, in order
    measured_only: list[int] = field(default_factory=list)  # chosen steps measured and not traced

    def settle(self, every_folder: bool) -> None:
        """Which steps there are: the step folders (the root itself only with a trace or a snapshot; a folder
        the flight recorder alone wrote is a measured step where the step logs measured it) and the steps
        measured with no folder; ``every_folder`` (the summary) keeps each folder as it is."""
        kept = [f for f in self.folders if every_folder or ((f.step is not None or f.has_files)
                                                            and not (f.step in self.measured and f.only_flight))]
        traced = {f.step for f in kept}
        extra = [s for s in self.measured if s not in traced]
        self.steps_found = sorted([f.step for f in kept] + extra, key=lambda s: (s is not None, s if s is not None else -1))
        self.steps = [self.planned[f.rel] for f in kept if f.rel in self.planned]
        self.measured_only = [s for s in extra if self.wants(s)]

    def wants(self, step: int | None) -> bool:
        """Whether ``--steps`` holds ``step``."""
        first, last = self.steps_range or (None, None)
        return first is None or (step is not None and first <= step <= last)


@dataclass
class RootView:
    """Every server below ROOT (``servers``: those ``--replica`` chose; ``names``: every one's)."""

    root: str  # ROOT as the user wrote it
    servers: list[ServerView]
    names: list[str]
    fleet: bool  # several servers below ROOT: the report sets them side by side
    notes: list[str] = field(default_factory=list)  # what reading the root could not keep (a cache it cannot write)

    def shown(self, rel: str) -> str:
        """A path below ROOT as the report names it: joined to ROOT as the user wrote it."""
        return os.path.join(self.root, rel) if rel else self.root

    def trace_jobs(self) -> list[TraceJob]:
        """Every trace pass the report reads, each once: the steps' worker traces, then the flight recorder
        windows'."""
        return list(dict.fromkeys([job for s in self.servers for step in s.steps for job in step.jobs]
                                  + [job for s in self.servers for found in s.anomalies.values()
                                     for a in found for job in a.jobs]))

    def memory_files(self) -> list[str]:
        return list(dict.fromkeys(rel for s in self.servers for step in s.steps for _, rel in step.memory))


def below(path: Any, root: Any) -> str:
    """``path``'s place below ``root`` as text (``""``: ROOT itself)."""
    rel = str(Path(str(path)).relative_to(Path(str(root)))) if str(path) != str(root) else ""
    return "" if rel == "." else rel
