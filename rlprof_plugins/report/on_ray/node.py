"""What runs on each node: list what it holds below ROOT, and read one trace (or memory snapshot) there.

These are rlprof's own functions as installed on the node: Ray sends each
task by name (``driver``), and the node imports them from its own rlprof,
whose version its listing says. ROOT is resolved on the node as written,
with ``~`` and environment variables expanded there (one template for nodes
that keep their traces in different places). Nothing outside ROOT is read:
hidden folders are skipped as the local report skips them, a symbolic link
that leads out of ROOT is named and left, and a task's path is refused if
it leaves ROOT.

The listing carries names, sizes and times of every file, and whole only
the small files the report reads as they are (manifests, claims, step logs,
flight recorder notes): a trace or a memory snapshot travels only as its
pass's summary, and so does a flight recorder's window (``<rank>.flight.json``,
up to its ``disk_mb``). Traces in folders without a manifest carry the rank and
world size their header records (``distributedInfo``: what places them).

Each trace's summary is kept on the node that read it, in the cache of
passes a local report keeps too (``passes.PassCache``), valid while the
file's size and time hold.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

from ... import __version__
from ...metrics.flight_dump import TRACE_SUFFIX as FLIGHT_WINDOW
from ...metrics.log import ROTATED as LINES_ROTATED, SUFFIX as LINES
from ...store.layout import MEMORY
from ...store.manifest import MANIFEST
from ...trace.format.naming import ASCEND_SUFFIX, ASCEND_TRACE_VIEW, trace_distributed
from ...store.step_files import TRACE_SUFFIXES
from ..wire import pack

# Files up to this size travel whole in the listing (manifests, claims, notes); the step logs' and request
# logs' JSON lines (rotated ones too) of any size, since the report reads them itself. Anything else larger
# (a trace written under another name) travels as its name and size alone.
SMALL = 4 << 20


def resolve(root_text: str) -> Path:
    """ROOT as this node reads it: ``~`` and ``$VARS`` expanded here, absolute."""
    return Path(os.path.abspath(os.path.expanduser(os.path.expandvars(root_text))))


def inside(root: Path, rel: str) -> Path:
    """``root/rel``, refused when it would lead out of ROOT."""
    path = Path(os.path.normpath(root / rel))
    if os.path.isabs(rel) or not (path == root or str(path).startswith(str(root) + os.sep)):
        raise ValueError(f"{rel}: outside {root}")
    return path


def kind_of(rel: str, name: str) -> str:
    """``trace``, ``window`` (a flight recorder's window of a rank: read by a pass, as a trace is),
    ``memory`` (an allocator snapshot) or ``file``."""
    parts = rel.split(os.sep)
    in_npu = any(p.endswith(ASCEND_SUFFIX) for p in parts[:-1])
    if (name == ASCEND_TRACE_VIEW and in_npu) or (not in_npu and name.endswith(TRACE_SUFFIXES)):
        return "trace"
    if name.endswith(FLIGHT_WINDOW):
        return "window"
    if name.endswith(".pickle") and len(parts) > 1 and parts[-2] == MEMORY:
        return "memory"
    return "file"


def listing(root_text: str) -> bytes:
    """What this node holds below ROOT, packed (``wire``): ``files`` ([path, bytes, mtime ns, kind], paths
    relative to ROOT), ``contents`` (the small files whole), ``distributed`` (manifest-less traces' rank and
    world size), ``skipped`` (what could not be listed, or leads out of ROOT), and who listed it."""
    root = resolve(root_text)
    out: dict[str, Any] = {"version": __version__, "host": socket.gethostname(), "root": str(root),
                           "exists": root.is_dir(), "files": [], "contents": {}, "distributed": {}, "skipped": []}
    if not out["exists"]:
        return pack(out)
    real_root = os.path.realpath(root)
    with_manifest: set[str] = set()
    traces: list[str] = []
    for top, dirs, names in os.walk(root, onerror=lambda e: out["skipped"].append(f"{e.filename}: {e.strerror}")):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        here = os.path.relpath(top, root)
        here = "" if here == "." else here
        if MANIFEST in names:
            with_manifest.add(here)
        for name in sorted(names):
            if name.startswith(".") and name.endswith(".tmp"):
                continue  # a writer's temporary
            path = os.path.join(top, name)
            rel = os.path.join(here, name) if here else name
            try:
                if os.path.islink(path) and not os.path.realpath(path).startswith(real_root + os.sep):
                    out["skipped"].append(f"{rel}: a link out of ROOT, not followed")
                    continue
                st = os.stat(path)
            except OSError as e:
                out["skipped"].append(f"{rel}: {e.strerror or e}")
                continue
            if not os.path.isfile(path):
                continue
            kind = kind_of(rel, name)
            out["files"].append([rel, st.st_size, st.st_mtime_ns, kind])
            if kind == "trace":
                traces.append(rel)
            elif kind == "file" and (st.st_size <= SMALL or name.endswith((LINES, LINES_ROTATED))):
                try:
                    with open(path, "rb") as f:
                        out["contents"][rel] = f.read()
                except OSError as e:
                    out["skipped"].append(f"{rel}: {e.strerror or e}")
    for rel in traces:
        folders = Path(rel).parents
        if not any(("" if str(d) == "." else str(d)) in with_manifest for d in folders):
            info = trace_distributed(root / rel)
            out["distributed"][rel] = {k: info[k] for k in ("rank", "world_size") if k in info}
    return pack(out)


def trace_pass(root_text: str, rel: str, rank: str, stage: str | None, use_cache: bool) -> tuple[bytes, bool, float]:
    """One trace's summary (``trace_stats``), packed, whether the node's cache of passes answered
    (``passes.PassCache``), and the seconds the pass took here; its ``path`` is ROOT-relative."""
    from ..passes import cached_trace_pass

    started = time.perf_counter()
    root = resolve(root_text)
    blob, cached = cached_trace_pass(root, inside(root, rel), rank, stage, use_cache)
    return blob, cached, time.perf_counter() - started


def memory_pass(root_text: str, rel: str) -> bytes:
    """A memory snapshot's numbers (``memory.rank_memory``), packed; ``{"error": ...}`` when unreadable."""
    from ..memory import rank_memory, read_snapshot

    path = inside(resolve(root_text), rel)
    try:
        return pack(rank_memory(read_snapshot(path)))
    except Exception as e:
        return pack({"error": f"{type(e).__name__}: {e}"})
