"""The command protocol between an engine's front end and its workers.

A front end (HTTP route, ``AsyncLLM.start_profile``) sends one command dict
to every worker and gets one reply dict per worker back (see
``session.ProfilerController.handle``). This module turns those replies into
one outcome for the caller, raising the error a user should see: 400 for an
invalid request, 409 for a state conflict, 503 when a worker lacks the
plugin. No engine imports; reads only a step folder's manifest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from . import manifest
from .errors import ConflictError, RequestError, UnavailableError
from .manifest import aggregate_state

UNAVAILABLE = "unavailable"


def unavailable_reply(reason: str) -> dict[str, Any]:
    """What a worker without the plugin's hooks answers."""
    return {"ok": False, UNAVAILABLE: reason}


def combine(replies: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One status for all ranks of a session; raises on any failed reply."""
    replies = [r if isinstance(r, dict) else {"ok": False, "error": repr(r)} for r in replies]
    for r in replies:
        if UNAVAILABLE in r:
            raise UnavailableError("step-aware profiling", r[UNAVAILABLE])
    for r in replies:
        if "invalid" in r:
            raise RequestError(r["invalid"]["field"], r["invalid"]["message"])
    sessions = [r.get("session") for r in replies if r.get("session")]
    for r in replies:
        if "conflict" in r:
            raise ConflictError(r["conflict"], _summary(sessions, replies))
    for r in replies:
        if not r.get("ok") and "error" in r:
            raise RuntimeError(f"rlprof worker error: {r['error']}")
    return _summary(sessions, replies)


def _summary(sessions: list[dict[str, Any]], replies: Sequence[dict[str, Any]]) -> dict[str, Any]:
    if not sessions:
        return {"state": "idle", "ranks": []}
    first = sessions[0]
    return {
        "session_id": first.get("session_id"),
        "global_step": first.get("global_step"),
        "state": aggregate_state([s["state"] for s in sessions]),
        "directory": first.get("directory"),
        "step_start": first.get("step_start"),
        "step_end": first.get("step_end"),
        "by_stage": first.get("by_stage"),
        "already_finished": any(r.get("already_finished") for r in replies),
        "ranks": sessions,
        "files": [f for s in sessions for f in s.get("files", [])],
        "errors": [s["error"] for s in sessions if s.get("error")],
    }


def with_step_manifest(result: dict[str, Any]) -> dict[str, Any]:
    """Fold the step folder's completion work (the ``merge`` option's merged
    trace) into a status: the workers are done before it is."""
    directory = result.get("directory")
    if result.get("global_step") is None or not directory:
        return result
    data = manifest.read(Path(directory))
    if not data or data.get("session_id") != result.get("session_id"):
        return result
    merge = (data.get("writers") or {}).get("merge")
    if not merge:
        return result
    files = [str(Path(directory) / f["path"]) for f in merge.get("files", [])]
    result["merge"] = {"state": merge.get("state"), "files": files, "error": merge.get("error")}
    result["files"] = list(result.get("files", [])) + files
    if result.get("state") == "done" and merge.get("state") in manifest.ACTIVE:
        result["state"] = merge["state"]
    if merge.get("error"):
        result.setdefault("errors", []).append(f"merge: {merge['error']}")
    return result
