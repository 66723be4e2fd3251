"""Patch module (HTTP server process): SGLang's routes, ``/start_profile`` with a global step, clear 400/409, ``/profile_status``,
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

from typing import Any

from rlprof_plugins.errors import RequestError
from rlprof_plugins.session.protocol import local_piece

from ..base import Patch
from ..features import HTTP_ROUTES
from ..http_common import PIECE_BYTES, native_validation_error
from ..profile_routes import PROFILE_PATHS, endpoints, requested_wait
from .facts import VERSIONS
from . import sessions, wire
from .start_requests import server_config


# What ``_install_routes`` keeps on the app for the routes: SGLang's http_server module (its
# ``_global_state`` holds the TokenizerManager) and SGLang's own endpoints, by path.
SERVER_STATE = "rlprof_http_server"
NATIVE_STATE = "rlprof_native_endpoints"


def _manager(raw_request):
    return getattr(raw_request.app.state, SERVER_STATE)._global_state.tokenizer_manager


def _native(raw_request, path: str):
    return getattr(raw_request.app.state, NATIVE_STATE)[path]


class SglangCalls:
    """How rlprof's routes (``profile_routes``) reach SGLang: its tokenizer manager, and its own endpoints
    where a call is SGLang's alone (a start without rlprof's fields on an unconfigured server)."""

    async def start(self, raw_request, body: Any):
        if not isinstance(body, dict):
            raise RequestError("body", f"must be a JSON object, got {type(body).__name__}")
        config = server_config()
        if config is None and not sessions.uses_rlprof(body):
            return await _native_start(_native(raw_request, "/start_profile"), body)
        return await sessions.start(_manager(raw_request), _native_fields(body), config)

    async def stop(self, raw_request):
        from fastapi.responses import JSONResponse

        if sessions.stop_is_native():
            return await _native(raw_request, "/stop_profile")()
        wait = await requested_wait(raw_request)
        manager = _manager(raw_request)
        replies = await wire.send(manager, {"op": "stop", "defer": True})
        if replies and all("native" in r for r in replies):
            return JSONResponse({"status": "stopped", "native": replies[0]["native"]})
        return await sessions.until_written(manager, replies, wait)

    async def status(self, raw_request, global_step: int | None) -> dict:
        return await sessions.status(_manager(raw_request), global_step)

    async def send(self, raw_request, command: dict) -> list:
        return await wire.send(_manager(raw_request), command)

    def reader(self, raw_request, global_step: int, rank: str, path: str):
        manager = _manager(raw_request)

        async def read_piece(offset: int) -> dict:
            return local_piece(await sessions.status(manager, global_step), rank, path, offset, PIECE_BYTES)

        return read_piece


def _body_type():
    """SGLang's start body type: ``ProfileReqInput`` (keyword era, up to 0.5.14), ``ProfileReq`` (0.5.15+)."""
    from sglang.srt.managers import io_struct

    return getattr(io_struct, "ProfileReqInput", None) or io_struct.ProfileReq


def _validated(body: dict) -> Any:
    """``body`` read as SGLang's own route reads it: FastAPI validates it into the body type with pydantic,
    so a number given as a string becomes a number, unknown fields are dropped, and a value the type cannot
    hold is answered by SGLang's own handler, as on its route, before anything reaches a scheduler."""
    from pydantic import TypeAdapter, ValidationError

    try:
        return TypeAdapter(_body_type()).validate_python(body)
    except ValidationError as e:
        raise native_validation_error(e.errors()) from None


def _native_fields(body: dict) -> dict:
    """The fields of ``body`` SGLang's own route defines, converted as that route converts them (``start_step``
    given as ``"15"`` is 15), for rlprof's route to read as SGLang would; the rest of the body as given."""
    import dataclasses

    body_type = _body_type()
    if dataclasses.is_dataclass(body_type):
        names = {f.name for f in dataclasses.fields(body_type)}
    else:
        import msgspec

        names = {f.name for f in msgspec.structs.fields(body_type)}
    given = {k: v for k, v in body.items() if k in names}
    if not given:
        return body
    validated = _validated(given)
    return {**body, **{k: getattr(validated, k) for k in given}}


async def _native_start(endpoint, body: dict):
    """SGLang's own /start_profile, for a body without rlprof fields on an unconfigured server, validated
    first as SGLang's route validates it (the endpoint is called directly, past FastAPI's validation)."""
    return await endpoint(_validated(body) if body else None)


def _install_routes(module: Any):
    from fastapi.routing import APIRoute

    routes = module.app.router.routes
    found = {r.path: (i, r) for i, r in enumerate(routes) if isinstance(r, APIRoute) and r.path in PROFILE_PATHS}
    if set(found) != set(PROFILE_PATHS):
        raise RuntimeError(f"SGLang's profiling routes not found (have {sorted(found)})")
    state = module.app.state
    setattr(state, SERVER_STATE, module)
    setattr(state, NATIVE_STATE, {path: route.endpoint for path, (_, route) in found.items()})
    level = getattr(found["/start_profile"][1].endpoint, "_auth_level", None)
    added = []
    for declared, endpoint in endpoints(SglangCalls()):
        if level is not None:
            endpoint._auth_level = level  # SGLang's middleware reads it off the endpoint
        path = declared.path
        methods = sorted(found[path][1].methods) if path in found else [declared.method]  # a replaced route keeps its own
        route = APIRoute(path, endpoint, methods=methods, name=declared.name)
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
        for name in (SERVER_STATE, NATIVE_STATE):
            state._state.pop(name, None)

    return undo


def _add_prometheus_middleware(wrapped, instance, args, kwargs):
    """SGLang's ``/metrics`` (``--enable-metrics``) serves a registry of its schedulers' multiprocess
    files; the one mounted here serves the same plus rlprof's step series (``metrics.series``)."""
    out = wrapped(*args, **kwargs)
    try:
        from rlprof_plugins.config.launch_config import from_environment

        config = from_environment()
        if config is None or not config.torch_profiler_dir or not config.options.step_metrics:
            return out
        app = args[0] if args else kwargs["app"]
        from prometheus_client import CollectorRegistry, make_asgi_app, multiprocess
        from rlprof_plugins.metrics.series import register

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        register(config.server_root(), registry)
        for route in reversed(app.routes):
            if getattr(route, "path", None) == "/metrics" and hasattr(route, "app"):
                route.app = make_asgi_app(registry=registry)  # the same mount, path and workaround kept
                break
    except Exception as e:  # /metrics keeps SGLang's own series
        from rlprof_plugins._log import logger

        logger.warning("rlprof: step series not added to /metrics: %s: %s", type(e).__name__, e)
    return out


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
    # /metrics with rlprof's step series beside SGLang's
    wrap={"add_prometheus_middleware": _add_prometheus_middleware},
    optional=("add_prometheus_middleware",),
    install_targets=("app routes /start_profile, /stop_profile (replaced); /profile_status, /profile_file, "
                     "/profile_step, /rlprof/flight_dump (added)",),
    relies_on={
        "app": "present",
        "_global_state": "present",
        "sglang.srt.managers.tokenizer_manager:TokenizerManager.auto_create_handle_loop": "signature",
        "sglang.srt.managers.io_struct:ProfileReq": "fields:profile_id,activities",
    },
)

PATCHES = (HTTP_PATCH,)
