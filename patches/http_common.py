"""What the vLLM and SGLang profiling routes share: reading a body, the
``global_step`` query, and turning rlprof's errors into HTTP answers
(400/409/503 with a JSON body; anything else 500, logged)."""

from __future__ import annotations

import json
from typing import Any

from rlprof_plugins._log import logger
from rlprof_plugins.errors import ConflictError, RequestError, UnavailableError


KNOWN_ERRORS = (RequestError, ConflictError, UnavailableError)
# The engines' own profiling routes, which rlprof's replace.
PROFILE_PATHS = ("/start_profile", "/stop_profile")


def error_response(exc: Exception):
    from fastapi.responses import JSONResponse

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


def stop_status(result: dict) -> str:
    return "already_finished" if result.get("already_finished") else "stopped"
