"""The report's plan: every pass ``rlprof report`` or ``summary`` will ask for below ROOT, before any runs.

Found the way the renderer finds them, by the same functions: each
server's step folders (``store.servers.replicas_of``, ``summary.step_dirs``),
each step's worker traces as its manifest or its file names place them
(``store.step_files.plan``, ``trace_stats.step_jobs``), its memory
snapshots (``memory.memory_files``) and its flight recorder windows
(``anomalies.window_jobs``). An executor that runs passes before the
report is made (on Ray) runs these; a pass the renderer asks for and the
plan lacks is answered as not read, never as empty numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..store.layout import step_folders
from ..store.servers import replicas_of
from ..store.step_files import plan as step_plan
from ..trace.analysis.trace_stats import TraceJob, step_jobs
from .anomalies import window_jobs
from .memory import memory_files
from .summary import step_dirs


@dataclass
class PassPlan:
    """The passes below one root: trace passes (file, rank, stage) and memory snapshots, each once."""

    traces: list[TraceJob] = field(default_factory=list)
    memory: list[Any] = field(default_factory=list)

    def add_trace(self, job: TraceJob) -> None:
        if job not in self._seen:
            self._seen.add(job)
            self.traces.append(job)

    def __post_init__(self) -> None:
        self._seen: set[TraceJob] = set(self.traces)


def plan_passes(root: Path, *, replica: str | None = None, steps: tuple[int, int] | None = None,
                memory: bool = True, windows: bool = True) -> PassPlan:
    """Every pass the report of ``root`` (``--replica``, ``--steps`` as given) reads; without ``memory`` or
    ``windows`` (``rlprof summary``: traces alone), no memory snapshot or flight recorder window."""
    servers = [r.root for r in replicas_of(root) if replica is None or r.name == replica] or [root]
    out = PassPlan()
    for server in servers:
        for step, directory in step_dirs(server):
            if steps and (step is None or not steps[0] <= step <= steps[1]):
                continue
            try:
                groups = step_plan(directory).groups
            except Exception:  # a folder that cannot be read: the renderer names it
                groups = []
            for _, job in step_jobs(groups):
                out.add_trace(job)
            if memory:
                out.memory += [path for _, path in memory_files(directory)]
        for step, directory in step_folders(server) if windows else []:  # flight recorder windows, measured steps' too
            if not steps or steps[0] <= step <= steps[1]:
                for job in window_jobs(directory):
                    out.add_trace(job)
    return out
