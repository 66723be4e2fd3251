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
pass's summary. Traces in folders without a manifest carry the rank and
world size their header records (``distributedInfo``: what places them).

Each trace's summary is kept on the node that read it, in
``ROOT/.rlprof-report-cache/passes/`` (as the local report keeps its rows
there), valid while the file's size and time hold.
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
from pathlib import Path
from typing import Any

from ... import __version__
from ...store.layout import MEMORY
from ...atomic_files import write_bytes_atomic
from ...store.manifest import MANIFEST
from ...trace.format.naming import ASCEND_SUFFIX, ASCEND_TRACE_VIEW, trace_distributed
from ...store.step_files import TRACE_SUFFIXES
from ..cache import CACHE_DIR, SUFFIX, VERSION
from .wire import pack, unpack

SMALL = 4 << 20  # files up to this size travel whole in the listing (manifests, claims, notes); JSON of any size
PASSES_DIR = "passes"  # below the report cache: each trace's summary, on the node that read it


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
    """``trace``, ``memory`` (an allocator snapshot) or ``file``."""
    parts = rel.split(os.sep)
    in_npu = any(p.endswith(ASCEND_SUFFIX) for p in parts[:-1])
    if (name == ASCEND_TRACE_VIEW and in_npu) or (not in_npu and name.endswith(TRACE_SUFFIXES)):
        return "trace"
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
            elif kind == "file" and (st.st_size <= SMALL or name.endswith((".json", ".jsonl"))):
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
    """One trace's summary (``trace_stats``), packed, whether the node's cache answered, and the seconds
    the pass took here; its ``path`` is ROOT-relative."""
    from ...trace.analysis.trace_stats import trace_stats

    started = time.perf_counter()
    root = resolve(root_text)
    path = inside(root, rel)
    st = os.stat(path)
    key = [rel, rank, stage, st.st_size, st.st_mtime_ns]
    cached = _cache_path(root, rel, rank, stage)
    if use_cache:
        blob = _cached(cached, key)
        if blob is not None:
            return blob, True, time.perf_counter() - started
    stats = trace_stats(path, rank, stage)
    stats.path = Path(rel)
    blob = pack(stats)
    if use_cache and stats.error is None:
        try:
            os.makedirs(cached.parent, exist_ok=True)
            write_bytes_atomic(cached, _entry(key, blob))
        except OSError:
            pass  # a read-only ROOT: the pass is still returned
    return blob, False, time.perf_counter() - started


def memory_pass(root_text: str, rel: str) -> bytes:
    """A memory snapshot's numbers (``memory.rank_memory``), packed; ``{"error": ...}`` when unreadable."""
    from ..memory import rank_memory, read_snapshot

    path = inside(resolve(root_text), rel)
    try:
        return pack(rank_memory(read_snapshot(path)))
    except Exception as e:
        return pack({"error": f"{type(e).__name__}: {e}"})


def _cache_path(root: Path, rel: str, rank: str, stage: str | None) -> Path:
    name = hashlib.sha1(f"{rel}\0{rank}\0{stage}".encode()).hexdigest()
    return root / CACHE_DIR / PASSES_DIR / f"{name}{SUFFIX}"


def _entry(key: list, blob: bytes) -> bytes:
    """The key's line (what the file was read from), then the blob."""
    return repr([VERSION, key]).encode("utf-8", "backslashreplace") + b"\n" + blob


def _cached(path: Path, key: list) -> bytes | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    head, _, blob = data.partition(b"\n")
    if head != repr([VERSION, key]).encode("utf-8", "backslashreplace"):
        return None
    try:
        unpack(blob)  # a damaged entry counts as absent
    except Exception:
        return None
    return blob
