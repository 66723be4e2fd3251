"""SGLang HTTP routes: ``/start_profile`` with a global step, clear 400/409, ``/profile_status``,
``/profile_file`` (a rank's written file, from this server's disk: a step spanning
nodes is collected from a shared directory or each node's folder).

SGLang's routes parse the body into ``ProfileReq``, which drops unknown
fields (``global_step`` vanishes silently), answer every failure with HTTP
500 and report nothing about the session. We put our routes in place of
SGLang's two (same paths, methods and auth level, so SGLang's API-key
middleware guards them as before) and add ``GET /profile_status``.

Who handles a start: rlprof when the server was started with
``--profiler-config`` (or ``RLPROF_PROFILER_CONFIG``) or when the body uses
a field SGLang does not define (rlprof's ``global_step``, vLLM's
``delay_iterations``, ...); otherwise SGLang's own endpoint, unchanged. The
body is parsed by ``requests.parse_start`` like every entry point's: SGLang's
fields keep their meaning (``start_step`` counts forward passes from server
start, ``num_steps``, ``profile_by_stage``, ``output_dir`` inside the allowed
directories, ...); the few rlprof cannot honour are refused with 400 naming
them, never ignored.
"""

# No "from __future__ import annotations": FastAPI must see the real Request type.

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any, Optional

from rlprof_plugins.store import reaping as writers
from rlprof_plugins._log import session_event
from rlprof_plugins.session.protocol import (check_wait, combine, local_piece, roster_command, stop_wait_seconds,
                                    wait_until_written, with_step_manifest)
from rlprof_plugins.errors import RequestError
from rlprof_plugins.config.options import ProfileOptions
from rlprof_plugins.config.launch_config import ProfilerConfig
from rlprof_plugins.config.request_fields import SGLANG, needs_rlprof

from ..base import Patch
from ..features import HTTP_ROUTES
from ..http_common import (PIECE_BYTES, PROFILE_PATHS, error_response, file_query, file_response, json_body,
                           status_step, stop_status)
from . import weight_version
from .facts import VERSIONS
from .scheduler import encode_command
from .start_requests import build_request, server_config


# Marks a ProfileReq that only rlprof's scheduler patch acts on: a scheduler
# without it starts no profiler for an activity it does not know.
MARKER_ACTIVITY = "RLPROF"

_used = False  # this process started an rlprof session: stops go to rlprof too


def mark_used() -> None:
    """An rlprof session was started from this process (route or in-process call)."""
    global _used
    _used = True


def was_used() -> bool:
    return _used


def stop_is_native() -> bool:
    """Whether a stop is SGLang's own: no rlprof configuration, and no rlprof
    session started in this process (then only SGLang's profiler can be running)."""
    return server_config() is None and not was_used()


def uses_rlprof(body: dict) -> bool:
    """Whether a body needs rlprof on a server without rlprof configuration."""
    return needs_rlprof(SGLANG, body)


def profile_req(command: dict) -> Any:
    """SGLang's ``ProfileReq`` carrying an rlprof command. Its kind field is
    ``req_type`` in the msgspec-struct era (0.5.15+), ``type`` before."""
    from sglang.srt.managers.io_struct import ProfileReq, ProfileReqType

    names = getattr(ProfileReq, "__struct_fields__", None) or [f.name for f in dataclasses.fields(ProfileReq)]
    kind = ProfileReqType.STOP_PROFILE if command["op"] == "stop" else ProfileReqType.START_PROFILE
    return ProfileReq(**{"req_type" if "req_type" in names else "type": kind},
                      profile_id=encode_command(command), activities=[MARKER_ACTIVITY])


async def send(tokenizer_manager: Any, command: dict) -> list:
    """One command to every scheduler; one reply per rank."""
    tokenizer_manager.auto_create_handle_loop()
    req = profile_req(command)
    replies: list = []
    for result in await tokenizer_manager.profile_communicator(req):
        try:
            answer = json.loads(result.message)
        except (TypeError, ValueError):
            answer = None
        if not isinstance(answer, list):
            reason = "a scheduler answered without rlprof (its patch is not applied there; see the scheduler log)"
            replies.append({"ok": False, "unavailable": reason})
        else:
            replies.extend(answer)
    return replies


# ---- routes -----------------------------------------------------------------
async def _body(raw_request) -> dict:
    body = await json_body(raw_request)
    if not isinstance(body, dict):
        raise RequestError("body", f"must be a JSON object, got {type(body).__name__}")
    return body


def build_routes(module: Any, native: dict):
    """Our three endpoints; ``native`` maps each path to SGLang's endpoint."""
    from fastapi import Request
    from fastapi.responses import JSONResponse

    def manager():
        return module._global_state.tokenizer_manager

    async def start_profile(raw_request: Request):
        try:
            body = await _body(raw_request)
            config = server_config()
            if config is None and not uses_rlprof(body):
                return await _native_start(native["/start_profile"], body)
            result = await start(manager(), body, config)
        except Exception as e:
            return error_response(e)
        return JSONResponse({"status": "started", **result})

    async def stop_profile(raw_request: Request):
        try:
            if stop_is_native():
                return await native["/stop_profile"]()
            body = await json_body(raw_request)  # SGLang's stop takes no body; rlprof reads "wait" only
            wait = check_wait(body.get("wait")) if isinstance(body, dict) else None  # before anything stops
            replies = await send(manager(), {"op": "stop", "defer": True})
            if replies and all("native" in r for r in replies):
                return JSONResponse({"status": "stopped", "native": replies[0]["native"]})
            result = await until_written(manager(), replies, wait)
        except Exception as e:
            return error_response(e)
        return JSONResponse({"status": stop_status(result), **result})

    async def profile_status(raw_request: Request):
        try:
            result = await status(manager(), status_step(raw_request))
        except Exception as e:
            return error_response(e)
        return JSONResponse(result)

    async def profile_file(raw_request: Request):
        try:
            step, rank, path = file_query(raw_request)

            async def read_piece(offset: int) -> dict:
                return local_piece(await status(manager(), step), rank, path, offset, PIECE_BYTES)

            return await file_response(read_piece)
        except Exception as e:
            return error_response(e)

    return {"/start_profile": start_profile, "/stop_profile": stop_profile, "/profile_status": profile_status,
            "/profile_file": profile_file}


async def start(tokenizer_manager: Any, body: dict, config: Optional[ProfilerConfig]) -> dict:
    """An rlprof session from a start body (the route's or an in-process call's), on every scheduler."""
    request = build_request(body, config, weight_version.reader(tokenizer_manager))
    await asyncio.to_thread(writers.reap_all, Path(request.output_dir))
    result = combine(await send(tokenizer_manager, request.to_command()))
    roster = roster_command(result)
    if roster is not None:  # a server spanning nodes: each folder's manifest names where the others write
        await send(tokenizer_manager, roster)
    mark_used()
    session_event("started", result)
    return {**result, "warnings": list(request.warnings)} if request.warnings else result


async def stop(tokenizer_manager: Any, wait: Any = None) -> dict:
    """Stop the session on every scheduler; returns once its files are written (see ``until_written``)."""
    return await until_written(tokenizer_manager, await send(tokenizer_manager, {"op": "stop", "defer": True}), wait)


async def until_written(tokenizer_manager: Any, replies: list, wait: Any) -> dict:
    """The schedulers' stop replies as one status, once the files are written:
    polled from here (the schedulers keep serving), at most ``stop_wait_seconds``;
    ``wait`` false: at once."""
    config = server_config()
    timeout = stop_wait_seconds(config.options if config else ProfileOptions(), wait)
    result = with_step_manifest(combine(replies))
    if timeout:
        result = await wait_until_written(result, lambda step: status(tokenizer_manager, step), timeout)
    session_event("stopped", result)
    return result


async def status(tokenizer_manager: Any, global_step: Optional[int]) -> dict:
    return with_step_manifest(combine(await send(tokenizer_manager, {"op": "status", "global_step": global_step})))


async def _native_start(endpoint, body: dict):
    """SGLang's own /start_profile, for a body without rlprof fields on an
    unconfigured server. Its body type: ``ProfileReqInput`` (keyword era, up
    to 0.5.14), ``ProfileReq`` (0.5.15+)."""
    from sglang.srt.managers import io_struct

    body_type = getattr(io_struct, "ProfileReqInput", None) or io_struct.ProfileReq
    try:
        obj = body_type(**body) if body else None
    except (TypeError, ValueError) as e:
        raise RequestError("body", f"not a valid SGLang profile request: {e}") from None
    return await endpoint(obj)


def _install_routes(module: Any):
    from fastapi.routing import APIRoute

    routes = module.app.router.routes
    found = {r.path: (i, r) for i, r in enumerate(routes) if isinstance(r, APIRoute) and r.path in PROFILE_PATHS}
    if set(found) != set(PROFILE_PATHS):
        raise RuntimeError(f"SGLang's profiling routes not found (have {sorted(found)})")
    endpoints = build_routes(module, {path: route.endpoint for path, (_, route) in found.items()})
    level = getattr(found["/start_profile"][1].endpoint, "_auth_level", None)
    added = []
    for path, endpoint in endpoints.items():
        if level is not None:
            endpoint._auth_level = level  # SGLang's middleware reads it off the endpoint
        methods = ["GET"] if path not in found else sorted(found[path][1].methods)
        route = APIRoute(path, endpoint, methods=methods, name=f"rlprof_{path.strip('/')}")
        if path in found:
            routes[found[path][0]] = route
        else:
            routes.append(route)
            added.append(route)

    def undo() -> None:
        for path, (i, original) in found.items():
            routes[i] = original
        for route in added:
            routes.remove(route)

    return undo


HTTP_PATCH = Patch(
    name="sglang.http.profile_routes",
    engine="sglang",
    versions=VERSIONS,
    module="sglang.srt.entrypoints.http_server",
    feature=HTTP_ROUTES,
    why=("native routes drop global_step and other unknown fields, answer every failure with 500 and "
         "have no status route"),
    upstream="profile routes that forward the whole body and a status route",
    install=_install_routes,
    install_targets=("app routes /start_profile, /stop_profile (replaced); /profile_status, /profile_file (added)",),
    relies_on={
        "app": "present",
        "_global_state": "present",
        "sglang.srt.managers.tokenizer_manager:TokenizerManager.auto_create_handle_loop": "signature",
        "sglang.srt.managers.io_struct:ProfileReq": "fields:profile_id,activities",
    },
)

PATCHES = (HTTP_PATCH,)
