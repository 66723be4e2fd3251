"""The report's passes: the one way ``rlprof report`` and ``summary`` read a trace or a memory snapshot.

A pass is named by its file's path below ROOT and its result carries that path, under every executor
(``LocalPasses`` here; ``PlannedPasses`` answering with what the Ray nodes read). A trace pass's result
is kept on the machine that ran it (``PassCache``), keyed by the path, rank, stage, size and modification
time: one entry answers a local report and a Ray node reading a shared root alike.
"""

from __future__ import annotations

import hashlib
import os
import socket
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from ...atomic_files import write_bytes_atomic
from ...trace.analysis.memory_snapshot import snapshot_numbers
from ...trace.analysis.trace_stats import TraceJob, TraceStats, trace_stats
from ...trace.format.gz import file_size
from ..._parallel import pool, processes_for
from ..plan.state_store import CACHE_DIR, SUFFIX, VERSION
from .wire import pack, unpack

PASSES_DIR = "passes"  # below the report cache: each trace's summary, on the machine that read it


@dataclass
class Analysis:
    """Where a report read its traces and what travelled: the JSON's ``analysis`` object. ``engine`` is
    ``local`` or ``ray``; ``bytes_returned`` counts the summaries (and the nodes' plans) that came back over
    the network: 0 for a local run. A local run counts the traces it read this time (a step its cache
    answered reads none); a run on Ray counts every trace it covers (each node's cache answers on the node,
    and its summary still travels)."""

    engine: str
    nodes: list[str] = field(default_factory=list)
    traces_per_node: dict[str, int] = field(default_factory=dict)
    trace_bytes: int = 0
    bytes_returned: int = 0
    node_cache_hits: int = 0
    unread: list[dict[str, str]] = field(default_factory=list)  # {"path", "node", "reason"}
    faults: list[str] = field(default_factory=list)  # nodes that could not list ROOT or run rlprof
    versions: dict[str, str] = field(default_factory=dict)  # nodes whose rlprof is another release
    seconds: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)  # on Ray every field; a local run, what it counts
        return out if self.engine == "ray" else {k: out[k] for k in ("engine", "nodes", "traces_per_node",
                                                                     "trace_bytes", "bytes_returned")}

    @property
    def faulty(self) -> bool:
        """Something below ROOT could not be read, or a node could not list it."""
        return bool(self.unread or self.faults)


class Passes(Protocol):
    """An executor of the report's passes, as the renderer asks for them."""

    analysis: Analysis

    def traces(self, jobs: list[TraceJob], progress: Callable[[str], None] | None) -> list[TraceStats]:
        """Each job's ``TraceStats`` (its ``path`` the job's, below ROOT), in order (an unreadable trace:
        ``error`` set)."""

    def memory(self, path: Path) -> dict[str, Any]:
        """A memory snapshot's numbers (``memory_snapshot.snapshot_numbers``; ``path`` below ROOT); raises when it cannot
        be read."""


# ---- the one cache of passes --------------------------------------------------------------------
class PassCache:
    """Each trace pass's packed result (``wire``) below ``root``, valid while the file's size and time hold."""

    def __init__(self, root: Path) -> None:
        self.folder = Path(root) / CACHE_DIR / PASSES_DIR

    def _path(self, rel: str, rank: str, stage: str | None) -> Path:
        name = "\0".join((rel, rank, str(stage))).encode()
        return self.folder / f"{hashlib.sha1(name).hexdigest()}{SUFFIX}"

    def get(self, key: list) -> TraceStats | None:
        """The entry's result, None when absent, stale or damaged."""
        try:
            head, _, blob = self._path(*key[:3]).read_bytes().partition(b"\n")
            value = unpack(blob) if head == _head(key) else None
        except Exception:  # no entry, or a damaged one: absent
            return None
        return value if isinstance(value, TraceStats) else None

    def forget_missing(self, root: Path) -> None:
        """Drop the entries of files no longer below ``root`` (retention pruned their step folders), and
        entries too damaged to say which file they were read from."""
        for entry in self.folder.glob(f"*{SUFFIX}") if self.folder.is_dir() else []:
            try:
                with open(entry, "rb") as f:
                    head = f.readline()
            except OSError:
                continue
            try:
                gone = not (root / entry_key(head)[1][0]).exists()
            except Exception:  # not a key this cache wrote: nothing can use the entry
                gone = True
            if gone:
                with suppress(OSError):
                    os.unlink(entry)

    def unwritable(self) -> str | None:
        """Why entries cannot be kept below the root (None: they can)."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            return f"{self.folder}: {e.strerror or e}"
        return None

    def put(self, key: list, blob: bytes) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_bytes_atomic(self._path(*key[:3]), _head(key) + b"\n" + blob)
        except OSError:
            pass  # a read-only ROOT: the pass is still answered


def entry_key(head: bytes) -> list:
    """An entry's first line read back: ``[VERSION, key]`` (plain literals only)."""
    import ast

    return ast.literal_eval(head.decode("utf-8", "backslashreplace").strip())


def _head(key: list) -> bytes:
    """An entry's first line: what the file was read from, and by which release's shape of results."""
    return repr([VERSION, key]).encode("utf-8", "backslashreplace")


def trace_pass(root: Path, rel: Path, rank: str, stage: str | None, report: bool,
               kept: bool) -> tuple[TraceStats, bool]:
    """``trace_stats`` of ``root/rel`` (its ``path`` ``rel``), through the cache of passes below ``root`` when
    ``kept``, and whether the cache answered: what this process, a pool's worker and a Ray node run."""
    path = root / rel
    try:
        st = os.stat(path) if kept else None
    except OSError:
        st = None
    key = [str(rel), rank, stage, st.st_size, st.st_mtime_ns] if st else None  # what the entry holds
    cache = PassCache(root)
    stats = cache.get(key) if key else None
    if stats is not None:
        return stats, True
    stats = trace_stats(path, rank, stage, report)
    stats.path = rel
    if key and stats.error is None:
        cache.put(key, pack(stats))
    return stats, False


# ---- executors -------------------------------------------------------------------------------------
class LocalPasses:
    """The passes on this machine, as each step is read: in this process, or in a pool of processes (one
    per trace, up to the cores) when the step is large. Counts what it read (``analysis``)."""

    def __init__(self, root: Path, use_cache: bool = True) -> None:
        self.root = Path(root)
        self.use_cache = use_cache
        self.analysis = Analysis("local", nodes=[socket.gethostname()])

    def traces(self, jobs: list[TraceJob], progress: Callable[[str], None] | None) -> list[TraceStats]:
        host = self.analysis.nodes[0]
        self.analysis.traces_per_node[host] = self.analysis.traces_per_node.get(host, 0) + len(jobs)
        size = sum(file_size(self.root / job.path) for job in jobs)
        self.analysis.trace_bytes += size
        processes = processes_for(len(jobs), size)
        report = progress is not None
        if report and jobs:
            progress(f"reading {len(jobs)} traces ({size / 1e6:,.0f} MB) with "
                     + (f"{processes} processes" if processes > 1 else "one process"))
        calls = [(self.root, job.path, job.rank, job.stage, report, self.use_cache) for job in jobs]
        if processes > 1:
            with pool(processes) as workers:
                answers = list(workers.map(trace_pass, *zip(*calls)))
        else:
            answers = [trace_pass(*call) for call in calls]
        self.analysis.node_cache_hits += sum(cached for _, cached in answers)
        return [stats for stats, _ in answers]

    def memory(self, path: Path) -> dict[str, Any]:
        return snapshot_numbers(self.root / path)


@dataclass
class PlannedPasses:
    """The passes of a plan executed beforehand (on Ray: on the nodes that hold the files), answered by the
    file's path under ROOT. A pass the plan did not hold, or that was not read, answers with the reason."""

    analysis: Analysis
    traces_read: dict[tuple[str, str, str | None], TraceStats | str] = field(default_factory=dict)
    memory_read: dict[str, dict[str, Any] | str] = field(default_factory=dict)

    def traces(self, jobs: list[TraceJob], progress: Callable[[str], None] | None) -> list[TraceStats]:
        out = []
        for job in jobs:
            rel = str(job.path)
            got = self.traces_read.get((rel, job.rank, job.stage), f"{rel}: not read (no pass was planned for it)")
            if isinstance(got, TraceStats):
                stats = got
                stats.path = job.path
            else:
                stats = TraceStats(job.rank, job.stage, job.path)
                stats.error = got
            out.append(stats)
        return out

    def memory(self, path: Path) -> dict[str, Any]:
        got = self.memory_read.get(str(path), "not read (no pass was planned for it)")
        if not isinstance(got, dict):
            raise RuntimeError(got)
        return got
