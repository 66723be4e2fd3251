"""What the vLLM and SGLang profiling routes share: reading a body, the
``global_step`` query, streaming a step's file (``GET /profile_file``), and
turning rlprof's errors into HTTP answers (400/404/409/503 with a JSON body;
anything else 500, logged)."""

from __future__ import annotations

import json
from typing import Any

from rlprof_plugins._log import logger
from rlprof_plugins.errors import ConflictError, NotFoundError, RequestError, UnavailableError
from rlprof_plugins.metrics.flight import FLIGHT_DUMP_PATH  # noqa: F401 (the flight dump route's path)


KNOWN_ERRORS = (RequestError, ConflictError, UnavailableError, NotFoundError)
PIECE_BYTES = 4 << 20  # one read of a streamed file


def native_validation_error(errors: list[dict]) -> Exception:
    """What FastAPI raises for a body its route's model refuses, with pydantic's ``errors`` located in the
    body: raised out of a route, the engine's own handler answers it (vLLM's and SGLang's 400, each in its
    own format), exactly as it answers the same body on the native route."""
    from fastapi.exceptions import RequestValidationError

    return RequestValidationError([{**e, "loc": ("body", *e.get("loc", ()))} for e in errors])


def error_response(exc: Exception):
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    if isinstance(exc, RequestValidationError):
        raise exc  # the engine's own handler answers it
    if isinstance(exc, KNOWN_ERRORS):
        return JSONResponse(status_code=exc.status, content=exc.to_json())
    logger.exception("rlprof: profiling route failed")
    return JSONResponse(status_code=500, content={"error": {"type": "internal", "message": f"{type(exc).__name__}: {exc}"}})


async def json_body(raw_request) -> Any:
    """The request's JSON body ({} when empty); 400 naming ``body`` when it is not JSON."""
    raw = await raw_request.body()
    try:
        return json.loads(raw) if raw.strip() else {}
    except ValueError as e:
        raise RequestError("body", f"is not valid JSON: {e}") from None


def status_step(raw_request) -> int | None:
    """``GET /profile_status?global_step=N``: N, or None without the query."""
    step = raw_request.query_params.get("global_step")
    if step is not None and not step.isdigit():
        raise RequestError("global_step", f"must be an integer >= 0, got {step!r}")
    return None if step is None else int(step)


def step_answer(global_step: int, replies: list) -> dict:
    """``POST /profile_step``'s answer: the step, and whether each rank's step metrics took it."""
    ranks = [r if isinstance(r, dict) else {"ok": False, "error": str(r)} for r in replies or []]
    return {"status": "marked" if ranks and all(r.get("ok") for r in ranks) else "not_marked",
            "global_step": global_step, "ranks": ranks,
            "step_metrics": any(r.get("step_metrics") for r in ranks)}


def start_status(result: dict) -> str:
    """A start's ``status``: ``ignored`` where a session was already running and the call gave the engine's own fields
    only (SGLang answers such a start as done)."""
    return "ignored" if result.get("ignored") else "started"


def stop_status(result: dict) -> str:
    if result.get("ignored"):
        return "ignored"  # nothing was running, and the call gave the engine's fields only
    return "already_finished" if result.get("already_finished") else "stopped"


def file_query(raw_request) -> tuple[int, str, str]:
    """``GET /profile_file?global_step=N&rank=R&path=P``: a file of a step as
    its rank wrote it (``path`` relative to the rank's step folder, as the
    manifest lists it; ``manifest.json`` for the rank's folder's manifest)."""
    step = status_step(raw_request)
    if step is None:
        raise RequestError("global_step", "is required")
    query = raw_request.query_params
    for field in ("rank", "path"):
        if not query.get(field):
            raise RequestError(field, "is required")
    return step, query["rank"], query["path"]


async def file_response(read_piece):
    """The file ``await read_piece(offset)`` reads piece by piece (``{"data", "size"}``)
    as a streamed answer. The first piece is read before answering, so a
    missing file is a 404, not a broken stream."""
    from fastapi.responses import StreamingResponse

    first = await read_piece(0)

    async def pieces():
        piece, offset = first, 0
        while piece["data"]:
            yield piece["data"]
            offset += len(piece["data"])
            if offset >= piece["size"]:
                return
            piece = await read_piece(offset)

    return StreamingResponse(pieces(), media_type="application/octet-stream",
                             headers={"Content-Length": str(first["size"])})


def flight_folder() -> str:
    """A requested flight recorder dump's folder name, the same for every rank of the server."""
    import time

    from rlprof_plugins.metrics.flight_dump import folder_name
    from rlprof_plugins.metrics.flight import REQUESTED

    now = time.time_ns()
    return f"{folder_name(now, REQUESTED)}-{now // 1_000_000 % 1000:03d}"


def flight_answer(folder: str, replies: list) -> dict:
    """``POST /rlprof/flight_dump``'s answer: the folder each rank writes its window into (after
    ``after_seconds``), below its current step's ``flight/``; ``off`` where no rank records."""
    ranks = [r if isinstance(r, dict) else {"ok": False, "error": str(r)} for r in replies or []]
    on = [r for r in ranks if r.get("flight_recorder")]
    status = "dumping" if on and all(r.get("ok") for r in ranks) else "off" if not on else "partial"
    steps = sorted({r.get("global_step") for r in on}, key=lambda s: (s is None, s or 0))
    return {"status": status, "folder": folder, "global_steps": steps, "ranks": ranks}
