"""What one server's answer to a profiling route means, as a ``ServerResult``.

The routes answer with rlprof's session JSON on success and with
``{"error": {"type", "field"|"feature", "message"}}`` on failure (400, 409,
503; 401 without the API key). A 200 without a session state, or a 404,
means the server has no rlprof routes (plugin missing, or no profiler
configured), which is said as such instead of passing for success.
"""

from __future__ import annotations

from .http import API_KEY_ENV, Reply
from .results import ServerResult


def _base(reply: Reply) -> ServerResult:
    return ServerResult(url="", ok=False, http_status=reply.status, body=reply.body)


def session_answer(path: str, reply: Reply) -> ServerResult:
    """A start or status answer: ok with the session's state, or the reason it failed."""
    result = _base(reply)
    body = reply.body if isinstance(reply.body, dict) else {}
    if reply.status == 200 and reply.error is None and "state" in body:
        result.ok = True
        _fill(result, body)
        if result.state == "failed":  # the server answered; its session did not succeed
            errors = body.get("errors") or []
            result.ok, result.error = False, "session failed: " + ("; ".join(map(str, errors)) or "no reason given")
    else:
        result.error = failure(path, reply)
    return result


def stop_answer(path: str, reply: Reply) -> ServerResult:
    result = _base(reply)
    body = reply.body if isinstance(reply.body, dict) else {}
    if reply.status == 200 and body.get("status") in ("stopped", "already_finished"):
        result.ok = True
        _fill(result, body)
    else:
        result.error = failure(path, reply)
    return result


def mark_answer(path: str, reply: Reply) -> ServerResult:
    """``POST /profile_step``: ok when every rank took the step (a rank without step metrics still
    answers ok, saying so in ``step_metrics``)."""
    result = _base(reply)
    body = reply.body if isinstance(reply.body, dict) else {}
    if reply.status == 200 and body.get("status") == "marked":
        result.ok, result.global_step, result.state = True, body.get("global_step"), "marked"
    else:
        result.error = failure(path, reply) if body.get("status") != "not_marked" else (
            "not every rank took the step: " + "; ".join(str(r.get("error") or r.get("unavailable") or r)
                                                       for r in body.get("ranks", []) if not r.get("ok")))
    return result


def dump_answer(path: str, reply: Reply) -> ServerResult:
    """``POST /rlprof/flight_dump``: ok when every rank's flight recorder takes it; its folder, below each rank's
    step's ``flight/``, in ``directory``. A server whose recorder is off says so (``state`` off, not ok)."""
    result = _base(reply)
    body = reply.body if isinstance(reply.body, dict) else {}
    if reply.status == 200 and body.get("status") == "dumping":
        steps = body.get("global_steps") or []
        result.ok, result.state = True, "dumping"
        result.global_step = steps[0] if len(steps) == 1 else None
        result.directory = body.get("folder")
    elif reply.status == 200 and body.get("status") in ("off", "partial"):
        result.state = body["status"]
        result.error = ("the flight recorder is off on this server (flight_recorder, step_metrics and a directory "
                        "turn it on)" if body["status"] == "off" else "not every rank's flight recorder took it: "
                        + "; ".join(str(r.get("error") or r.get("unavailable") or "off")
                                    for r in body.get("ranks", []) if not r.get("flight_recorder")))
    else:
        result.error = failure(path, reply)
    return result


def _fill(result: ServerResult, body: dict) -> None:
    result.state = body.get("state")
    result.global_step = body.get("global_step")
    result.directory = body.get("directory")
    result.files = [f for f in body.get("files") or [] if isinstance(f, str)]


def failure(path: str, reply: Reply) -> str:
    """One line saying why a server's answer is not a success, naming the field when there is one."""
    if not reply.reached:
        return str(reply.error)
    if reply.status == 200:
        return (f"answered {path} without rlprof's session state (is rlprof-plugins installed there, "
                f"with a profiler configured?)")
    if reply.status == 404:
        return (f"HTTP 404: no {path} route (is rlprof-plugins installed there, with a profiler configured?)")
    detail = error_detail(reply)
    if reply.status == 401:
        detail = f"{detail or 'unauthorized'} (give the servers' API key: api_key= or ${API_KEY_ENV})"
    return f"HTTP {reply.status}: {detail or 'no details'}"


def error_detail(reply: Reply) -> str | None:
    """The reason an error answer gives: rlprof's ``{"error": {type, field|feature, message}}``,
    another service's ``error``/``detail``/``message``, or why the answer was not JSON."""
    body = reply.body
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        err = body["error"]
        parts = [err.get("type"), err.get("field") or err.get("feature"), err.get("message")]
        return ": ".join(str(p) for p in parts if p)
    if isinstance(body, dict) and body:
        return str(body.get("error") or body.get("detail") or body.get("message") or body)
    return reply.error


def settled(result: ServerResult, global_step: int | None, timeout: float, timed_out: bool) -> ServerResult:
    """A server's last status as the outcome of waiting for it."""
    if not result.ok:
        return result
    step = "" if global_step is None else f" for global step {global_step}"
    if timed_out:
        result.ok, result.error = False, f"still {result.state} after {timeout:g} s"
    elif result.state == "idle":
        result.ok, result.error = False, f"no profiling session{step}"
    elif result.state != "done":
        result.ok, result.error = False, f"unexpected state {result.state!r}"
    return result
