"""rlprof's profiling routes, declared once for both engines.

Each route is a ``Route``: its method and path, and the handler that reads the
request and shapes the answer. What differs between vLLM and SGLang is only how
a route reaches the engine (vLLM's engine client, SGLang's tokenizer manager),
so each engine's HTTP patch gives an ``EngineCalls`` and binds every route with
``endpoints``; where it mounts them (an ``APIRouter`` on vLLM, SGLang's own
route list in place of its two) stays with the engine. A route added here is
served by both engines.
"""

# No "from __future__ import annotations": FastAPI must see the real Request type.

from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Protocol

try:  # FastAPI reads the endpoints' annotations; both engines' HTTP servers have Starlette
    from starlette.requests import Request
except ImportError:  # no HTTP stack in this interpreter: no route is ever installed
    Request = object

from rlprof_plugins.config.requests import parse_mark_step
from rlprof_plugins.session.protocol import check_wait

from .http_common import (FLIGHT_DUMP_PATH, error_response, file_query, file_response, flight_answer, flight_folder,
                          json_body, start_status, status_step, step_answer, stop_status)

ReadPiece = Callable[[int], Awaitable[dict]]  # a file's bytes from an offset: ``{"data", "size"}``


class EngineCalls(Protocol):
    """How one engine's routes reach its sessions. ``start`` and ``stop`` answer a result the route wraps
    with its ``status``, or a response of the engine's own (its native route's answer) given back as it is."""

    async def start(self, raw_request: Any, body: Any) -> Any: ...

    async def stop(self, raw_request: Any) -> Any: ...

    async def status(self, raw_request: Any, global_step: int | None) -> dict: ...

    async def send(self, raw_request: Any, command: dict) -> list: ...

    def reader(self, raw_request: Any, global_step: int, rank: str, path: str) -> ReadPiece: ...


def _json(content: dict):
    from fastapi.responses import JSONResponse

    return JSONResponse(content)


async def start_profile(engine: EngineCalls, raw_request):
    """A session started with rlprof's fields and the engine's own."""
    result = await engine.start(raw_request, await json_body(raw_request))
    return _json({"status": start_status(result), **result}) if isinstance(result, dict) else result


async def stop_profile(engine: EngineCalls, raw_request):
    """The running session stopped; with ``wait``, answered once its files are written."""
    result = await engine.stop(raw_request)
    return _json({"status": stop_status(result), **result}) if isinstance(result, dict) else result


async def requested_wait(raw_request) -> float | None:
    """A stop's ``wait`` (seconds to wait for the files), checked before anything stops. The engines' own stops
    take no body; an engine whose own stop handles the call reads none."""
    body = await json_body(raw_request)
    return check_wait(body.get("wait")) if isinstance(body, dict) else None


async def profile_status(engine: EngineCalls, raw_request):
    """The sessions' state on every rank, or one global step's (``?global_step=N``)."""
    return _json(await engine.status(raw_request, status_step(raw_request)))


async def profile_step(engine: EngineCalls, raw_request):
    """The trainer's RL step from now on, for the step metrics of every rank."""
    step = parse_mark_step(await json_body(raw_request))
    return _json(step_answer(step, await engine.send(raw_request, {"op": "mark_step", "global_step": step})))


async def flight_dump(engine: EngineCalls, raw_request):
    """Every rank's flight recorder writes what it holds, into one folder name."""
    folder = flight_folder()
    return _json(flight_answer(folder, await engine.send(raw_request, {"op": "flight_dump", "folder": folder})))


async def profile_file(engine: EngineCalls, raw_request):
    """A file of a step as its rank wrote it, streamed."""
    step, rank, path = file_query(raw_request)
    return await file_response(engine.reader(raw_request, step, rank, path))


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    handle: Callable[[EngineCalls, Any], Awaitable[Any]]
    replaces_native: bool = False  # the engine serves this path itself; rlprof's route takes its place

    @property
    def name(self) -> str:
        """The route's name in the server's route table (and its OpenAPI operation): ``rlprof_<path>``."""
        return "rlprof_" + self.path.strip("/").removeprefix("rlprof/").replace("/", "_")


ROUTES: tuple[Route, ...] = (
    Route("POST", "/start_profile", start_profile, replaces_native=True),
    Route("POST", "/stop_profile", stop_profile, replaces_native=True),
    Route("GET", "/profile_status", profile_status),
    Route("POST", "/profile_step", profile_step),
    Route("GET", "/profile_file", profile_file),
    Route("POST", FLIGHT_DUMP_PATH, flight_dump),
)
PROFILE_PATHS = tuple(r.path for r in ROUTES if r.replaces_native)  # the engines' own routes, which rlprof's replace


def endpoints(engine: EngineCalls) -> list[tuple[Route, Callable]]:
    """Each route bound to ``engine``, as a FastAPI endpoint: rlprof's errors answered as HTTP (400, 404, 409,
    503 with a JSON body naming the field; anything else 500, logged), the engine's own validation errors left
    to the engine's handler."""

    def bind(route: Route) -> Callable:
        async def endpoint(raw_request: Request):
            try:
                return await route.handle(engine, raw_request)
            except Exception as e:
                return error_response(e)

        endpoint.__name__ = endpoint.__qualname__ = route.name
        return endpoint

    return [(route, bind(route)) for route in ROUTES]
