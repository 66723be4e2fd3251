"""The report's plan: one walk of ROOT that reads every small file the report needs (``plan_root``).

For each server below ROOT (``store.servers.replicas_of``): each step folder's manifest, worker traces
(``store.step_files.plan``), memory snapshots and flight recorder dumps, its step logs (through their
store: ``measured_rows.measured_steps``) and its frontends' busy periods. The same walk plans a Ray
node's part of ROOT (``on_ray.node``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...metrics.flight_dump import TRACE_SUFFIX as WINDOW_SUFFIX
from ...step_logs.anomalies import read_anomalies
from ...step_logs.requests import read_periods
from ...store import manifest
from ...store.layout import FLIGHT_DIR, MEMORY, only_flight, step_folders, step_of
from ...store.servers import Replica, replicas_of
from ...store.step_files import plan as step_plan, trace_files
from ...trace.analysis.trace_stats import TraceJob
from ...trace.format.gz import file_size
from ...trace.format.naming import ASCEND_SUFFIX, parse, parse_ascend_folder
from ...trace.format.rank_files import missing_line
from .state_store import StateStore
from .measured_rows import measured_steps
from .view import AnomalyView, Folder, GroupView, RootView, ServerView, StepView, below


class NoSuchReplica(ValueError):
    """``--replica NAME`` names no replica below the root."""


def plan_root(root: Any, *, shown: str | None = None, replica: str | None = None,
              steps: tuple[int, int] | None = None, memory: bool = True, windows: bool = True,
              use_cache: bool = True, every_folder: bool = False) -> RootView:
    """The view of ``root`` (``shown``: ROOT as the user wrote it): ``replica`` and ``steps`` as given; without
    ``memory`` or ``windows`` (``rlprof summary``), no memory snapshot or flight recorder dump; with
    ``use_cache``, the step logs are read through their store below each server; ``every_folder`` keeps the
    root as a step even without a trace (what the summary lists). ``FileNotFoundError`` for a missing root,
    ``NoSuchReplica`` for a ``replica`` that names none."""
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: not a directory")
    every = replicas_of(root)
    chosen = choose(every, replica, shown or str(root))
    view = RootView(shown or str(root), [], [r.name for r in every], fleet=len(chosen) > 1)
    for r in chosen or [Replica("", root)]:
        store = StateStore(r.root, enabled=use_cache)
        server = plan_server(root, r, *measured_steps(r.root, store), steps=steps, memory=memory, windows=windows)
        server.settle(every_folder)
        view.servers.append(server)
        if store.write_error:
            view.notes.append(f"no result cache: {store.write_error}")
    return view


def choose(servers: list, replica: str | None, shown: str) -> list:
    """The servers ``--replica`` names (all without it); ``NoSuchReplica`` where it names none."""
    chosen = servers if replica is None else [s for s in servers if s.name == replica]
    if replica is not None and not chosen:
        names = [s.name for s in servers]
        raise NoSuchReplica(f"--replica {replica}: no such replica below {shown} "
                            f"({'replicas: ' + ', '.join(names) if names else 'it holds one server'})")
    return chosen


def plan_server(root: Any, replica: Replica, measured: Any, warnings: list[str], *,
                steps: tuple[int, int] | None = None, memory: bool = True, windows: bool = True) -> ServerView:
    """One server's view, not yet settled (``ServerView.settle``): ``measured`` its measured steps (what
    ``measured_rows.measured_steps`` read, or on a node the step logs' records), ``warnings`` what reading
    them said."""
    server = replica.root
    view = ServerView(replica.name, below(server, root), [], {}, measured, read_periods(server), {}, warnings,
                      steps_range=steps)
    folders, own = step_folders(server), step_of(server)
    # the server's global_step_N folders by N, else the server's folder itself (a folder of traces)
    for step, directory in folders if folders and own is None else [(own, server)]:
        traces = trace_files(directory)
        memory_of = memory_files(directory) if memory else []
        has_files = bool(traces or memory_of)
        folder = Folder(step, below(directory, root), has_files, not has_files and only_flight(directory))
        view.folders.append(folder)
        if view.wants(step):
            view.planned[folder.rel] = _step(root, step, directory, traces, memory_of)
    for step, directory in folders if windows else []:  # flight recorder dumps, measured steps' too
        if view.wants(step) and (found := _anomalies(root, directory)):
            view.anomalies[step] = found
    return view


def _step(root: Any, step: int | None, directory: Any, traces: list, memory: list[tuple[str, Any]]) -> StepView:
    data = manifest.read(directory) or {}
    error = None
    if data.get("state") == "failed":
        errors = [w.get("error") for w in (data.get("writers") or {}).values() if w.get("error")]
        error = "; ".join(errors) or "the manifest says failed"
    groups, unplaced, assumed, read = [], [], [], True
    try:
        p = step_plan(directory)
    except Exception as e:  # the folder itself cannot be read: the step stays, saying why
        error, read = f"{type(e).__name__}: {e}", False
    else:
        groups = [GroupView(g.stage, [TraceJob(Path(below(rf.path, root)), rf.label, g.stage)
                                      for rf in g.inputs if rf.role == "worker"], g.missing, missing_line(g), g.group)
                  for g in p.groups]
        unplaced = [(below(u.path, root), u.reason, u.role) for u in p.unplaced]
        assumed = p.assumed
    files = files_of(directory, traces) + [
        {"path": str(p.relative_to(directory)), "bytes": file_size(p), "role": "memory", "rank": rank, "stage": None}
        for rank, p in memory if p.is_file()]
    return StepView(step, below(directory, root), data.get("state", "no manifest" if traces else "empty"),
                    {k: data.get(k) for k in ("engine", "engine_version", "by_stage")}, error, groups, unplaced,
                    assumed, files, sum(file_size(p) for p in traces),
                    [(rank, below(p, root)) for rank, p in memory], bool(traces or memory), read)


def files_of(directory: Path, traces: list[Path]) -> list[dict[str, Any]]:
    """Each trace file of the step: path below the step folder, size, whose it is."""
    out = []
    for path in traces:
        parts = path.relative_to(directory).parts
        ascend = [part for part in parts[:-1] if part.endswith(ASCEND_SUFFIX)]
        name = parse_ascend_folder(ascend[0]) if ascend else parse(path.name)
        out.append({"path": str(path.relative_to(directory)), "bytes": file_size(path),
                    "role": name.role if name else "other",
                    "rank": name.label if name else None, "stage": name.stage if name else None})
    return out


def memory_files(directory: Any) -> list[tuple[str, Any]]:
    """(rank, path) of each memory snapshot the step's manifest lists, else of ``memory/*.pickle``."""
    data = manifest.read(directory) or {}
    listed = [(f.get("rank") or Path(f["path"]).stem, directory / f["path"])
              for f in data.get("files", []) if f.get("kind") == "memory"]
    return listed or [(p.stem, p) for p in sorted((directory / MEMORY).glob("*.pickle"))]


def _anomalies(root: Any, directory: Any) -> list[AnomalyView]:
    """The step folder's flight recorder dumps, each with the passes of its window's traces."""
    out = []
    for data in read_anomalies(directory):
        dump = directory / FLIGHT_DIR / Path(data["path"]).name
        data["path"] = below(dump, root)
        out.append(AnomalyView(data, [TraceJob(Path(below(p, root)), p.name[:-len(WINDOW_SUFFIX)], None)
                                      for p in sorted(dump.glob(f"*{WINDOW_SUFFIX}"))]))
    return out
