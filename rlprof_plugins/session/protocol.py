"""The command protocol between an engine's front end and its workers.

A front end (HTTP route, ``AsyncLLM.start_profile``) sends one command dict
to every worker and gets one reply dict per worker back (see
``session.controller.ProfilerController.handle``). This module turns those replies into
one outcome for the caller, raising the error a user should see: 400 for an
invalid request, 409 for a state conflict, 503 when a worker lacks the
plugin. No engine imports; reads only a step folder's manifest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from ..store import destination, manifest, servers, upload
from ..errors import ConflictError, NotFoundError, RequestError, UnavailableError
from ..store.layout import read_piece
from ..store.manifest import aggregate_state

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


def ignored_as_native(conflict: ConflictError, call: str) -> dict[str, Any]:
    """The answer to a ``call`` ("start" or "stop") that gave only the engine's own fields and that the session
    state refuses, where the engine's own route answers such a call as done (a stop with nothing running on
    vLLM and SGLang, a second start on SGLang): callers written for the engine rely on that, so rlprof answers
    with the session as it is, ``ignored`` true and a warning saying why nothing changed. A call that uses
    rlprof's fields (a global step, ``wait``) gets the 409 that says so (``ConflictError``), as does a second
    start on vLLM, whose own route answers it with 409."""
    return {**conflict.state, "ignored": True,
            "warnings": [f"{conflict.message}: this {call} was ignored, as the engine's own profiler ignores it"]}


def _summary(sessions: list[dict[str, Any]], replies: Sequence[dict[str, Any]]) -> dict[str, Any]:
    if not sessions:
        return {"state": "idle", "ranks": []}
    first = sessions[0]
    return {
        "session_id": first.get("session_id"),
        "global_step": first.get("global_step"),
        "step_source": first.get("step_source"),
        "state": aggregate_state([s["state"] for s in sessions]),
        "directory": first.get("directory"),
        "step_start": first.get("step_start"),
        "step_end": first.get("step_end"),
        "by_stage": first.get("by_stage"),
        "already_finished": any(r.get("already_finished") for r in replies),
        "ranks": sessions,
        "nodes": nodes_of(sessions),
        "files": [f for s in sessions for f in s.get("files", [])],
        "errors": [s["error"] for s in sessions if s.get("error")],
    }


def nodes_of(sessions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ranks by node: host, folder, ranks and state of each (a server
    spanning nodes writes each node's ranks where that node's disk is)."""
    nodes: dict[tuple, dict[str, Any]] = {}
    for s in sessions:
        key = (s.get("node") or 0, s.get("host"), s.get("directory"))
        node = nodes.setdefault(key, {"node": key[0], "host": key[1], "directory": key[2], "ranks": [], "states": []})
        node["ranks"].append(s.get("rank"))
        node["states"].append(s.get("state"))
    out = []
    for node in nodes.values():
        node["state"] = aggregate_state(node.pop("states"))
        out.append(node)
    return out


def roster_command(result: dict[str, Any]) -> dict[str, Any] | None:
    """The ``roster`` command for a started session whose ranks run on several
    nodes (None otherwise): every rank then names, in its folder's manifest,
    where the ranks of the other nodes write."""
    ranks = result.get("ranks") or []
    if result.get("global_step") is None or len({r.get("node") or 0 for r in ranks}) < 2:
        return None
    return {"op": "roster", "session_id": result.get("session_id"), "global_step": result.get("global_step"),
            "roster": [{k: r.get(k) for k in ("rank", "node", "host", "directory")} for r in ranks]}


# A session in one of these states has written (or given up on) its files.
FINISHED = ("done", "failed", "idle")
WAIT_POLL_S = (0.02, 0.25)  # first and longest pause between two status polls


def check_wait(value: Any) -> bool | None:
    """A stop's ``wait`` (true: return once the files are written; false: at once)."""
    if value is not None and not isinstance(value, bool):
        raise RequestError("wait", f"must be true or false, got {value!r}")
    return value


def stop_wait_seconds(options: Any, wait: Any) -> float:
    """How long a stop waits for its session's files: the server's
    ``stop_wait_seconds`` (``options``: its ProfileOptions), or 0 for ``wait`` false."""
    return 0 if check_wait(wait) is False else options.stop_wait_seconds


class _StopWait:
    """When to poll again, and the answer, for a stop that waits for its session's files."""

    def __init__(self, result: dict[str, Any], timeout: float) -> None:
        import time

        self._clock = time.monotonic
        self.result, self.timeout = result, timeout
        self.started, self._pause = self._clock(), WAIT_POLL_S[0]
        self.timed_out = False

    def pending(self, status: dict[str, Any]) -> bool:
        writing = (self.result.get("state") not in FINISHED and status.get("state") not in FINISHED
                   and status.get("session_id") == self.result.get("session_id"))
        self.timed_out = writing and self._clock() - self.started >= self.timeout
        return writing and not self.timed_out

    def pause(self) -> float:
        pause, self._pause = self._pause, min(self._pause * 2, WAIT_POLL_S[1])
        return pause

    def answer(self, status: dict[str, Any]) -> dict[str, Any]:
        out = status if status.get("session_id") == self.result.get("session_id") else self.result
        out["waited_seconds"] = round(self._clock() - self.started, 3)
        if self.timed_out:
            out["wait_timed_out"] = True  # state stays "exporting": ask /profile_status later
        return out


async def wait_until_written(result: dict[str, Any], status_of, timeout: float) -> dict[str, Any]:
    """Poll ``await status_of(global_step)`` until the stopped session's files
    are written (or it failed), at most ``timeout`` seconds. The wait is the
    caller's: the engine keeps serving, each poll is one short status command."""
    import asyncio

    wait, status = _StopWait(result, timeout), result
    while wait.pending(status):
        await asyncio.sleep(wait.pause())
        status = await status_of(result.get("global_step"))
    return wait.answer(status)


def wait_until_written_sync(result: dict[str, Any], status_of, timeout: float) -> dict[str, Any]:
    """``wait_until_written`` for synchronous callers (``LLM.stop_profile``)."""
    import time

    wait, status = _StopWait(result, timeout), result
    while wait.pending(status):
        time.sleep(wait.pause())
        status = status_of(result.get("global_step"))
    return wait.answer(status)


def stop_when_written_sync(send: Callable[[dict[str, Any]], Sequence[dict[str, Any]]], options: Any,
                           wait: Any = None) -> dict[str, Any]:
    """A synchronous caller's stop that keeps the engines' promise: every rank stops (``send`` sends one
    command and returns the ranks' replies), then the answer waits until the session's files are
    written, at most ``stop_wait_seconds`` (``wait`` false: at once). ``LLM.stop_profile``, vLLM's own
    ``EngineCore.profile``."""
    timeout = stop_wait_seconds(options, wait)
    result = combine(send({"op": "stop"}))
    if timeout:
        result = wait_until_written_sync(with_step_manifest(result), lambda step: with_step_manifest(
            combine(send({"op": "status", "global_step": step}))), timeout)
    return result


def with_step_manifest(result: dict[str, Any]) -> dict[str, Any]:
    """Fold the step folder's completion work (the ``merge`` option's merged
    trace) into a status: the workers are done before it is."""
    directory = result.get("directory")
    if result.get("global_step") is None or not directory:
        return result
    data = manifest.read(Path(directory))
    if not data or data.get("session_id") != result.get("session_id"):
        return result
    fleet = servers.step_servers(directory)
    if len(fleet) > 1:  # servers sharing the directory: the status names every one of the step
        result["server"], result["servers"] = data.get("server"), fleet
    _with_recovery(result, data)
    _with_upload(result, data, Path(directory))
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


def _with_upload(result: dict[str, Any], data: dict[str, Any], directory: Path) -> None:
    """Where the step folder is written through a spool to an object store: its upload state
    (``uploading``, ``done``, ``failed`` with the reason and the command that finishes the job) and
    where it goes. Asking starts the spool's uploader again if it ended (``store.upload``)."""
    spool = destination.destination_at(directory)
    if spool is None:
        return
    state = data.get("upload") or {"state": upload.UPLOADING, "error": None, "pending": None,
                                   "destination": spool.url_of(directory),
                                   "finish": upload.finish_command(spool.spool)}
    result["upload"] = dict(state)
    if state.get("state") != upload.DONE:
        try:
            upload.ensure_running(spool.spool)
        except OSError as e:
            result["upload"]["error"] = result["upload"].get("error") or f"the uploader could not start: {e}"


def _with_recovery(result: dict[str, Any], data: dict[str, Any]) -> None:
    """A writer whose kept recording a command finished since (``store.recovery``)
    is done in the status too, naming the command; the step is done once none failed."""
    recovered = {name: section["recovered"] for name, section in (data.get("writers") or {}).items()
                 if section.get("recovered") and section.get("state") == "done"}
    if not recovered:
        return
    result["recovered"] = [{"writer": name, **r} for name, r in sorted(recovered.items())]
    for rank in result.get("ranks") or []:
        if rank.get("rank") in recovered and rank.get("state") == "failed":
            rank["state"], rank["error"] = "done", None
            rank["files"] = [str(Path(result["directory"]) / f["path"])
                             for f in data["writers"][rank["rank"]].get("files", [])]
    ranks = result.get("ranks") or []
    if ranks:
        result["files"] = [f for r in ranks for f in r.get("files", [])]
        result["errors"] = [r["error"] for r in ranks if r.get("error")]
    if result.get("state") == "failed" and data.get("state") == "done" and not result.get("errors"):
        result["state"] = "done"


# ---- files of a step, for rlprof collect ---------------------------------------
def file_piece(replies: Sequence[dict[str, Any]], rank: str, path: str) -> dict[str, Any]:
    """The piece of ``rank``'s file that its own worker read (``read`` command
    replies of every worker): ``{"data", "size"}``; 404 naming the field otherwise."""
    for r in replies:
        if isinstance(r, dict) and "data" in r:
            return r
    for r in replies:
        if isinstance(r, dict) and "missing" in r:
            raise NotFoundError("path", r["missing"])
        if isinstance(r, dict) and not r.get("ok") and "error" in r:  # e.g. removed since (keep_last_steps)
            raise NotFoundError("path", f"{rank} could not read {path!r}: {r['error']}")
    raise NotFoundError("rank", f"no rank named {rank!r} (the status lists each rank's name)")


def local_piece(status: dict[str, Any], rank: str, path: str, offset: int, length: int) -> dict[str, Any]:
    """A piece of a file the status lists for ``rank`` (``frontend``: the API
    server's trace), read from this process's disk; 404 naming the field when it
    is not listed, or lives on another node's disk."""
    if rank == "frontend":
        entry = {"directory": status.get("directory"), "files": (status.get("frontend") or {}).get("files", [])}
    else:
        entry = next((r for r in status.get("ranks", []) if r.get("rank") == rank), None)
        if entry is None:
            raise NotFoundError("rank", f"no rank named {rank!r} in global step {status.get('global_step')}")
    directory = Path(entry.get("directory") or ".")
    target = directory / path
    if path != manifest.MANIFEST and str(target) not in [str(f) for f in entry.get("files", [])]:
        raise NotFoundError("path", f"{rank} has no written file {path!r} in global step {status.get('global_step')}")
    try:
        return read_piece(target, offset, length)
    except FileNotFoundError:
        raise NotFoundError("path", f"{target} is not on this server's disk (node {entry.get('node', 0)}, "
                                    f"host {entry.get('host')}): use a shared directory") from None
