"""Patch module (API server): vLLM's HTTP routes, ``/start_profile`` with a JSON body, clear 400/409 answers.

vLLM's routes ignore unknown body fields, answer a double stop with HTTP 500
and return no information. When rlprof runs the sessions we register our own
routes at the same paths instead of vLLM's (only when a profiler is
configured, as vLLM does), plus ``GET /profile_status`` and ``GET
/profile_file`` (a rank's written file, read by that rank's worker wherever
its node is: what ``rlprof collect`` gathers a step spanning nodes with).

vLLM's ``--api-key`` guards only ``/v1``-style paths, so anyone who reaches
the server could start profiles and fill its disk. Our routes require the
same key (``--api-key`` or ``VLLM_API_KEY``) whenever one is configured,
unless ``routes_require_api_key`` is false.
"""

# No "from __future__ import annotations": FastAPI must see the real Request type.

import hashlib
import os
import secrets
from dataclasses import replace
from typing import Any

try:  # FastAPI reads the routes' annotations; vLLM's API server always has Starlette
    from starlette.requests import Request
except ImportError:  # no HTTP stack in this interpreter: no route is ever installed
    Request = object

from rlprof_plugins._log import logger
from rlprof_plugins.errors import UnavailableError
from rlprof_plugins.config.requests import parse_start

from ..base import Patch
from ..features import HTTP_ROUTES, STEP_WINDOWS
from ..http_common import PIECE_BYTES, native_validation_error
from ..profile_routes import PROFILE_PATHS, endpoints, requested_wait
from . import sessions, weight_reader
from .config import env_profiler_config, options_of, plugin_handles, request_server, root_of
from .facts import CONFIG_VERSIONS, ENV_ERA_VERSIONS


def api_tokens(args) -> list[str]:
    """The server's API keys, as vLLM's AuthenticationMiddleware finds them."""
    return [k for k in (getattr(args, "api_key", None) or [os.environ.get("VLLM_API_KEY")]) if k]


def authorized(header: str | None, tokens: list[str]) -> bool:
    scheme, _, given = (header or "").partition(" ")
    if scheme.lower() != "bearer":
        return False
    digest = hashlib.sha256(given.encode()).digest()
    return any(secrets.compare_digest(digest, hashlib.sha256(t.encode()).digest()) for t in tokens)


class Unauthorized(Exception):
    """A profiling route called without the server's API key (answered 401)."""


# What ``install_router`` keeps on the app for the routes: the profiler config they parse requests
# with, and the API keys they require (empty: no key required).
CONFIG_STATE = "rlprof_profiler_config"
TOKENS_STATE = "rlprof_api_tokens"


# ---- the routes: declared in profile_routes, reaching vLLM through VllmCalls ----
async def check_key(request: Request) -> None:
    """Every route's dependency: the ``Authorization: Bearer`` key, where the server requires one."""
    tokens = getattr(request.app.state, TOKENS_STATE, ())
    if tokens and not authorized(request.headers.get("Authorization"), tokens):
        raise Unauthorized()


class VllmCalls:
    """How rlprof's routes (``profile_routes``) reach vLLM: the API server's engine client, which the
    ``async_llm`` patch gives its profiling calls."""

    async def start(self, raw_request, body: Any) -> dict:
        _validated_as_vllm(body)
        server = request_server(getattr(raw_request.app.state, CONFIG_STATE))
        client = raw_request.app.state.engine_client
        if weight_reader.wanted(server.defaults, body or {}):  # the engine's version, read now
            server = replace(server, weight_version=await weight_reader.read_async(client))
        request = parse_start({} if body is None else body, server)
        if not callable(getattr(client, "profile_status", None)):  # what the async_llm patch adds
            raise UnavailableError(STEP_WINDOWS, "the AsyncLLM patch is not applied in the API server")
        return await sessions.start(client, request)

    async def stop(self, raw_request) -> dict:
        wait = await requested_wait(raw_request)  # vLLM ignores a stop's body; rlprof reads "wait" only
        return await raw_request.app.state.engine_client.stop_profile(**({} if wait is None else {"wait": wait}))

    async def status(self, raw_request, global_step: int | None) -> dict:
        return await raw_request.app.state.engine_client.profile_status(global_step)

    async def send(self, raw_request, command: dict) -> list:
        return await sessions.on_every_engine(raw_request.app.state.engine_client, command)

    def reader(self, raw_request, global_step: int, rank: str, path: str):
        return sessions.file_reader(raw_request.app.state.engine_client, global_step, rank, path, PIECE_BYTES)


def _validated_as_vllm(body: Any) -> None:
    """Refuse what vLLM's own route refuses, as it does: FastAPI validates the body with vLLM's
    ``StartProfileRequest`` (strict: ``"5"`` is no number there; unknown fields ignored), and vLLM's own
    handler answers what it refuses. Releases without a start body accept any."""
    try:
        from vllm.entrypoints.serve.profile.api_router import StartProfileRequest
    except ImportError:
        return
    if not isinstance(body, dict) or not body:
        return  # no body, or not an object: rlprof's own 400 naming ``body`` (vLLM answers 400 too)
    from pydantic import ValidationError

    try:
        StartProfileRequest.model_validate(body)
    except ValidationError as e:
        raise native_validation_error(e.errors()) from None


def build_router():
    """rlprof's routes (``profile_routes``), each behind ``check_key``."""
    from fastapi import APIRouter, Depends

    router = APIRouter(dependencies=[Depends(check_key)])
    for route, endpoint in endpoints(VllmCalls()):
        router.add_api_route(route.path, endpoint, methods=[route.method], name=route.name)
    return router


def install_router(app, cfg, args) -> None:
    """Our routes (and the 401 answer) on ``app``."""
    from fastapi.responses import JSONResponse

    tokens = api_tokens(args)
    guarded = bool(tokens) and options_of(cfg).routes_require_api_key
    setattr(app.state, CONFIG_STATE, cfg)
    setattr(app.state, TOKENS_STATE, tokens if guarded else [])
    if tokens and not guarded:
        logger.warning("rlprof: profiling routes are NOT guarded by the API key (routes_require_api_key=false)")
    logger.warning(
        "Profiler with mode 'torch' is enabled in the API server (rlprof routes%s). "
        "This should ONLY be used for local development!",
        ", API key required" if guarded else "",
    )
    app.include_router(build_router())
    _add_step_series(cfg)
    app.add_exception_handler(
        Unauthorized,
        lambda request, exc: JSONResponse(
            status_code=401,
            content={"error": {"type": "unauthorized", "message": "profiling routes need the server's API key "
                                                                  "(Authorization: Bearer <key>)"}},
        ),
    )


def _add_step_series(cfg) -> None:
    """rlprof's step series on vLLM's ``/metrics`` (prometheus_client's global registry, which the API
    server serves when it runs as one process), read from the ranks' files at each scrape."""
    if not options_of(cfg).step_metrics:
        return
    try:
        from rlprof_plugins.metrics.series import register

        register(root_of(cfg))
    except Exception as e:  # /metrics keeps vLLM's own series
        logger.warning("rlprof: step series not added to /metrics: %s: %s", type(e).__name__, e)


def _wrap_attach_router(wrapped, instance, args, kwargs):
    app = args[0] if args else kwargs["app"]
    cfg = getattr(app.state.args, "profiler_config", None)
    if not plugin_handles(cfg):
        return wrapped(*args, **kwargs)
    install_router(app, cfg, app.state.args)
    return None


def _wrap_build_app_env_era(wrapped, instance, args, kwargs):
    """vLLM < 0.13: the profiling routes are module-level and exist only if
    ``VLLM_TORCH_PROFILER_DIR`` was set at import; with rlprof configured
    (``RLPROF_PROFILER_CONFIG``) ours replace them or are added."""
    app = wrapped(*args, **kwargs)
    cfg = env_profiler_config()
    if not plugin_handles(cfg):
        return app
    from fastapi.routing import APIRoute

    app.router.routes[:] = [r for r in app.router.routes if not (isinstance(r, APIRoute) and r.path in PROFILE_PATHS)]
    install_router(app, cfg, args[0] if args else kwargs["args"])
    return app


ROUTER_PATCH = Patch(
    name="vllm.api_router.profile",
    engine="vllm",
    versions=CONFIG_VERSIONS,
    module="vllm.entrypoints.serve.profile.api_router",
    feature=HTTP_ROUTES,
    why="native routes ignore global_step, answer a double stop with 500, and have no status route",
    upstream="profile routes that forward a request body and map session errors to 4xx",
    wrap={"attach_router": _wrap_attach_router},
    area="vllm.http_routes",
    relies_on={"router": "present"},
)

ENV_ERA_ROUTER_PATCH = Patch(
    name="vllm.api_router.env_era",
    engine="vllm",
    versions=ENV_ERA_VERSIONS,
    module="vllm.entrypoints.openai.api_server",
    feature=HTTP_ROUTES,
    why=("before 0.13 the routes are registered at import only when VLLM_TORCH_PROFILER_DIR is set; "
         "build_app gets rlprof's routes when RLPROF_PROFILER_CONFIG is set"),
    upstream="the serve/profile api_router of vLLM 0.13",
    wrap={"build_app": _wrap_build_app_env_era},
    area="vllm.http_routes",
)

PATCHES = (ROUTER_PATCH, ENV_ERA_ROUTER_PATCH)
