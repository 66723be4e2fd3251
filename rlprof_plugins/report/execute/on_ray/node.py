"""What runs on each node, from the node's own rlprof: plan what it holds below ROOT, read one trace or
memory snapshot there.

ROOT is resolved on the node (``~`` and ``$VARS`` expanded there: one template for nodes that keep
traces in different places), and a path that leaves ROOT is refused. The plan sends the step logs as
their records, so a server whose ranks write on several nodes is measured over all of them; a trace
travels only as its pass's summary, kept in the node's own cache of passes.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

from .... import __version__
from ....step_logs.steps import read_steps
from ....store.servers import replicas_of
from ...plan.planner import plan_server
from ..wire import pack


def resolve(root_text: str) -> Path:
    """ROOT as this node reads it: ``~`` and ``$VARS`` expanded here, absolute."""
    return Path(os.path.abspath(os.path.expanduser(os.path.expandvars(root_text))))


def inside(root: Path, rel: str) -> Path:
    """``root/rel``, refused when it, or where its links lead, is outside ROOT."""
    path = Path(os.path.normpath(root / rel))
    real, real_root = os.path.realpath(path), os.path.realpath(root)
    if os.path.isabs(rel) or not (path == root or str(path).startswith(str(root) + os.sep)) or not (
            real == real_root or real.startswith(real_root + os.sep)):
        raise ValueError(f"{rel}: outside {root} (or a link out of it), not read")
    return path


def plan_here(root_text: str, steps: Any = None, memory: bool = True, windows: bool = True) -> bytes:
    """This node's part of ROOT, planned and packed (``wire``): ``servers`` (each server's view, its step logs'
    records as its ``measured``), ``sizes`` (every file a pass reads: bytes), and who planned it; ``steps``,
    ``memory``, ``windows`` as ``plan_root`` takes them."""
    root = resolve(root_text)
    out: dict[str, Any] = {"version": __version__, "host": socket.gethostname(), "root": str(root),
                           "exists": root.is_dir(), "servers": [], "sizes": {}, "skipped": []}
    if not out["exists"]:
        return pack(out)
    for replica in replicas_of(root):
        records, warnings = read_steps(replica.root)
        records.pop(None, None)  # iterations before any step was named: no step's row
        out["servers"].append(plan_server(root, replica, records, warnings, steps=tuple(steps) if steps else None,
                                          memory=memory, windows=windows))
    planned = [step for server in out["servers"] for step in server.planned.values()]
    dumps = [a for server in out["servers"] for found in server.anomalies.values() for a in found]
    for rel in {str(job.path) for found in (*planned, *dumps) for job in found.jobs} | {
            rel for step in planned for _, rel in step.memory}:
        try:
            out["sizes"][rel] = os.stat(inside(root, rel)).st_size
        except ValueError as e:
            out["skipped"].append(str(e))
        except OSError as e:
            out["skipped"].append(f"{rel}: {e.strerror or e}")
    return pack(out)


def trace_pass(root_text: str, rel: str, rank: str, stage: str | None, use_cache: bool) -> tuple[bytes, bool, float]:
    """One trace's summary (``trace_stats``), packed, whether the node's cache of passes answered
    (``passes.PassCache``), and the seconds the pass took here; its ``path`` is ROOT-relative."""
    from ..passes import trace_pass as run

    started = time.perf_counter()
    root = resolve(root_text)
    stats, cached = run(root, inside(root, rel).relative_to(root), rank, stage, False, use_cache)
    return pack(stats), cached, time.perf_counter() - started


def memory_pass(root_text: str, rel: str) -> bytes:
    """A memory snapshot's numbers (``memory_snapshot.snapshot_numbers``), packed; ``{"error": ...}`` when
    unreadable."""
    from ....trace.analysis.memory_snapshot import snapshot_numbers

    path = inside(resolve(root_text), rel)
    try:
        return pack(snapshot_numbers(path))
    except Exception as e:
        return pack({"error": f"{type(e).__name__}: {e}"})
