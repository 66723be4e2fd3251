"""``manifest.json``: what a global-step folder holds, kept current.

Several processes write into one step folder (every worker rank, the API
server). Each owns one section (``writers[<rank name>]``) and updates it
under an exclusive ``flock`` on ``.manifest.lock``: read, replace its
section, recompute the file list and the overall state, write atomically.
Tools (merge, summary) read this file instead of parsing file names.

A server spanning nodes (``nodes`` > 1 in the header) may write each node's
ranks into a folder of that node's own disk. A folder then waits only for
the ranks of the nodes that write into it (each worker section says its
``node``; a node holds ``expected_ranks / nodes`` ranks), and names the ranks
that live elsewhere (``elsewhere``: node, host, folder, ranks; from the
``roster`` the front end hands every rank once all have started). The status
answer is the one place that says when the whole step is complete.

The lock is ``flock``; where a mount refuses it (Lustre without ``-o flock``,
NFS without a lock daemon: ENOLCK, EOPNOTSUPP, ENOSYS) an exclusive ``mkdir``
of ``.manifest.lock.d`` takes its place (atomic on NFS and Lustre alike).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import time
from pathlib import Path
from typing import Any, Callable

from ..atomic_files import write_text_atomic
from .processes import identity

MANIFEST = "manifest.json"
LOCK = ".manifest.lock"
LOCK_DIR = ".manifest.lock.d"  # the lock where flock is refused
STALE_LOCK_S = 120.0  # a lock directory this old was left by a process that died holding it
NO_FLOCK = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)
SCHEMA = 1

# A session's states, spelled once: its status answer and its manifest section both say them (``session.states``).
WAITING = "waiting"  # started; the window has not begun yet
RECORDING = "recording"
EXPORTING = "exporting"
DONE = "done"
FAILED = "failed"
ACTIVE = (RECORDING, WAITING, EXPORTING)
TERMINAL = (DONE, FAILED)


def engine_header(*, engine: str, engine_version: str | None, expected_ranks: int, parallel: dict[str, int],
                  trace_dir: str | None, plugin_version: str, nodes: int = 1,
                  server: str | None = None) -> dict[str, Any]:
    """What every writer of a step's manifest says about the engine (each
    session adds its own window, global step and options). ``parallel``: the
    tp/pp/dp sizes, for readable rank names in merged traces; ``nodes``: how
    many nodes the server spans (each holds ``expected_ranks / nodes`` ranks);
    ``server``: the server's identity (``store.servers``), where it has one."""
    header = {"engine": engine, "engine_version": engine_version, "plugin_version": plugin_version,
              "expected_ranks": expected_ranks, "parallel": dict(parallel), "trace_dir": trace_dir,
              "nodes": max(1, int(nodes or 1))}
    if server:
        header["server"] = server
    return header


def aggregate_state(states: list[str]) -> str:
    """One state for many writers: still busy while any is busy."""
    for state in ACTIVE:
        if state in states:
            return state
    if FAILED in states:
        return FAILED
    return DONE if states else "idle"


def _node(entry: dict[str, Any]) -> int:
    return int(entry.get("node") or 0)


def _nodes_here(data: dict[str, Any]) -> list[int]:
    return sorted({_node(s) for s in data.get("writers", {}).values() if s.get("role") == "worker"})


def expected_here(data: dict[str, Any]) -> int:
    """The ranks this folder waits for: all of them, or on a server spanning
    nodes those of the nodes that write here (each worker section names its node)."""
    ranks = [s for s in data.get("writers", {}).values() if s.get("role") == "worker"]
    expected = int(data.get("expected_ranks") or len(ranks))
    nodes = int(data.get("nodes") or 1)
    if nodes <= 1:
        return expected
    return max(len(ranks), expected // nodes * len(_nodes_here(data)))


def _nodes(data: dict[str, Any]) -> None:
    """A multi-node folder's ``nodes_here`` and ``elsewhere`` (the other nodes' host, folder and ranks)."""
    here = data["nodes_here"] = _nodes_here(data)
    elsewhere: dict[int, dict[str, Any]] = {}
    for r in data.get("roster") or []:
        if _node(r) not in here:
            node = elsewhere.setdefault(_node(r), {"node": _node(r), "host": r.get("host"),
                                                   "directory": r.get("directory"), "ranks": []})
            node["ranks"].append(r.get("rank"))
    data["elsewhere"] = [elsewhere[n] for n in sorted(elsewhere)]


def _write(directory: Path, data: dict[str, Any]) -> None:
    """Recompute the overall state and file list, then write atomically (under the lock)."""
    ranks = [w for w, s in data["writers"].items() if s.get("role") == "worker"]
    states = [s["state"] for s in data["writers"].values()]
    if len(ranks) < expected_here(data):
        states.append(RECORDING)  # a rank has not reported yet
    if int(data.get("nodes") or 1) > 1:
        _nodes(data)
    data["state"] = aggregate_state(states)
    data["files"] = sorted((f for s in data["writers"].values() for f in s.get("files", [])), key=lambda f: f["path"])
    data["updated_at"] = time.time()
    write_text_atomic(directory / MANIFEST, json.dumps(data, indent=2, sort_keys=True) + "\n")


def rewrite(directory: Path, change: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
    """Apply ``change`` to the manifest under the lock; written when it returns
    True. Returns the manifest (None when the folder has none)."""
    if not (directory / MANIFEST).exists():
        return None
    with locked(directory):
        data = read(directory)
        if data is not None and change(data):
            _write(directory, data)
    return data


@contextlib.contextmanager
def locked(directory: Path):
    """The folder's manifest lock: ``flock``, or an exclusive ``mkdir`` where the mount refuses flock."""
    with open(directory / LOCK, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            refused = False
        except OSError as e:
            if e.errno not in NO_FLOCK:
                raise
            refused = True
        if refused:
            with _dir_lock(directory / LOCK_DIR):
                yield
        else:
            yield


@contextlib.contextmanager
def _dir_lock(path: Path, pause: float = 0.01):
    """``mkdir`` is atomic on every shared filesystem: who creates the folder holds the lock.
    A folder older than ``STALE_LOCK_S`` is taken over (its holder died): see ``_take_over``."""
    while True:
        try:
            os.mkdir(path)
            break
        except FileExistsError:
            try:
                seen = path.stat()
            except OSError:
                continue  # released meanwhile
            if time.time() - seen.st_mtime > STALE_LOCK_S:
                _take_over(path, seen)
                continue
            time.sleep(pause)
            pause = min(pause * 2, 0.2)
    try:
        yield
    finally:
        try:
            os.rmdir(path)
        except OSError:
            pass


def _take_over(path: Path, seen: os.stat_result) -> None:
    """Remove the stale lock folder ``seen``, and only it. Two waiters may both
    find it stale; the first removes it and a new holder may create a fresh
    one before the second acts, so a plain ``rmdir`` by the second would
    remove the new holder's lock. Takeovers are therefore serialised by a
    second ``mkdir`` lock, under which the folder is checked again: still the
    same folder (inode and mtime) and still stale, or left alone. (A takeover
    lock itself left by a dead process is taken after ``STALE_LOCK_S`` too:
    that needs two crashes in one folder.)"""
    guard = path.with_name(path.name + ".takeover")
    try:
        os.mkdir(guard)
    except FileExistsError:
        try:
            if time.time() - guard.stat().st_mtime > STALE_LOCK_S:
                os.rmdir(guard)
        except OSError:
            pass
        time.sleep(0.01)
        return
    try:
        now = path.stat()
        if (now.st_ino, now.st_mtime_ns) == (seen.st_ino, seen.st_mtime_ns) and \
                time.time() - now.st_mtime > STALE_LOCK_S:
            os.rmdir(path)
    except OSError:
        pass  # released or taken over meanwhile
    finally:
        os.rmdir(guard)


def read(directory: Path) -> dict[str, Any] | None:
    try:
        return json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def update(
    directory: Path,
    *,
    session_id: str,
    writer: str,
    section: dict[str, Any],
    header: dict[str, Any],
    on_complete: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Replace ``writer``'s section; returns the manifest as written.

    A manifest of another session (the same global step profiled again) is
    replaced. ``on_complete`` runs, after the lock is released, when this
    update is the one that makes every expected writer terminal.
    """
    directory.mkdir(parents=True, exist_ok=True)
    with locked(directory):
        data = read(directory)
        if data is None or data.get("session_id") != session_id:
            data = {"schema": SCHEMA, "session_id": session_id, "created_at": time.time(), "writers": {}}
        before = data.get("state")
        for key, value in header.items():
            data.setdefault(key, value)
        if int(header.get("expected_ranks") or 0) > int(data.get("expected_ranks") or 0):
            # the writer that knows the whole server (a data-parallel server's API server: each of its engines
            # knows only its own ranks) raises what the folder waits for
            data["expected_ranks"], data["parallel"] = header["expected_ranks"], header.get("parallel")
        data["writers"][writer] = {**section, "process": identity()}
        _write(directory, data)
    if on_complete is not None and data["state"] in TERMINAL and before not in TERMINAL:
        on_complete(data)  # outside the lock: it may update the manifest itself
    return data


def write_collected(directory: Path, parts: list[dict[str, Any]], collected_from: list[dict[str, Any]]) -> dict:
    """One manifest for a step gathered from several nodes' folders (``rlprof
    collect``): every node's writers, the header of the first; a node's own
    merged trace is left out (it holds that node's ranks only). Ranks of nodes
    not gathered stay expected, so the state says the step is incomplete."""
    if not parts:
        raise ValueError("no manifest to combine")
    first = parts[0]
    sessions = {p.get("session_id") for p in parts}
    if len(sessions) > 1:
        raise ValueError(f"the nodes' manifests belong to different sessions: {sorted(map(str, sessions))}")
    data = {k: v for k, v in first.items() if k not in ("writers", "files", "state", "nodes_here", "elsewhere")}
    data["writers"] = {name: section for part in parts for name, section in part.get("writers", {}).items()
                       if section.get("role") != "merge"}
    data["collected_from"] = collected_from
    directory.mkdir(parents=True, exist_ok=True)
    with locked(directory):
        _write(directory, data)
    return data
