"""``manifest.json``: what a global-step folder holds, kept current.

Several processes write into one step folder (every worker rank, the API
server). Each owns one section (``writers[<rank name>]``) and updates it
under an exclusive ``flock`` on ``.manifest.lock``: read, replace its
section, recompute the file list and the overall state, write atomically.
Tools (merge, summary) read this file instead of parsing file names.
"""

from __future__ import annotations

import fcntl
import json
import time
from pathlib import Path
from typing import Any, Callable

from .layout import write_text_atomic
from .processes import identity

MANIFEST = "manifest.json"
LOCK = ".manifest.lock"
SCHEMA = 1

ACTIVE = ("recording", "waiting", "exporting")
TERMINAL = ("done", "failed")


def engine_header(*, engine: str, engine_version: str | None, expected_ranks: int, parallel: dict[str, int],
                  trace_dir: str | None, plugin_version: str) -> dict[str, Any]:
    """What every writer of a step's manifest says about the engine (each
    session adds its own window, global step and options). ``parallel``: the
    tp/pp/dp sizes, for readable rank names in merged traces."""
    return {"engine": engine, "engine_version": engine_version, "plugin_version": plugin_version,
            "expected_ranks": expected_ranks, "parallel": dict(parallel), "trace_dir": trace_dir}


def aggregate_state(states: list[str]) -> str:
    """One state for many writers: still busy while any is busy."""
    for state in ACTIVE:
        if state in states:
            return state
    if "failed" in states:
        return "failed"
    return "done" if states else "idle"


def _write(directory: Path, data: dict[str, Any]) -> None:
    """Recompute the overall state and file list, then write atomically (under the lock)."""
    ranks = [w for w, s in data["writers"].items() if s.get("role") == "worker"]
    states = [s["state"] for s in data["writers"].values()]
    expected = data.get("expected_ranks") or len(ranks)
    if len(ranks) < expected:
        states.append("recording")  # a rank has not reported yet
    data["state"] = aggregate_state(states)
    data["files"] = sorted((f for s in data["writers"].values() for f in s.get("files", [])), key=lambda f: f["path"])
    data["updated_at"] = time.time()
    write_text_atomic(directory / MANIFEST, json.dumps(data, indent=2, sort_keys=True) + "\n")


def rewrite(directory: Path, change: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
    """Apply ``change`` to the manifest under the lock; written when it returns
    True. Returns the manifest (None when the folder has none)."""
    if not (directory / MANIFEST).exists():
        return None
    with open(directory / LOCK, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = read(directory)
        if data is not None and change(data):
            _write(directory, data)
    return data


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
    with open(directory / LOCK, "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = read(directory)
        if data is None or data.get("session_id") != session_id:
            data = {"schema": SCHEMA, "session_id": session_id, "created_at": time.time(), "writers": {}}
        before = data.get("state")
        for key, value in header.items():
            data.setdefault(key, value)
        data["writers"][writer] = {**section, "process": identity()}
        _write(directory, data)
    if on_complete is not None and data["state"] in TERMINAL and before not in TERMINAL:
        on_complete(data)  # outside the lock: it may update the manifest itself
    return data
