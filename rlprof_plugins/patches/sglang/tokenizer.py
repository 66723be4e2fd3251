"""Patch module (TokenizerManager process): SGLang's ``TokenizerManager.start_profile``/``stop_profile``: in-process calls through rlprof.

RL frameworks that embed SGLang call the tokenizer manager directly, not the
HTTP routes: verl awaits ``tokenizer_manager.start_profile(output_dir=...,
with_stack=..., record_shapes=..., start_step=None, num_steps=None)`` and
then ``stop_profile()``; slime does the same through ``sglang.Engine``.
Without this patch those calls bypass rlprof (only the routes were ours):
no windows, no global-step folders, the scheduler freezes for the export.

The method takes keyword arguments up to SGLang 0.5.14 and a ``ProfileReq``
from 0.5.15 (where keywords raise ``TypeError``). This wrapper takes both
forms on every release. When rlprof is configured in this process
(``--profiler-config`` or ``RLPROF_PROFILER_CONFIG``) or the call uses a
field SGLang does not define (rlprof's ``global_step``, vLLM's
``delay_iterations``, ...) or a trainer integration gave the RL step
(``rlprof_plugins.step_sources.trainer``: verl's server actor), the request is
parsed like an HTTP body (same fields, same errors, raised naming the
field) and sent to the schedulers as an
rlprof command; the stop returns once the files are written (bounded by
``stop_wait_seconds``), as SGLang's own stop does. Otherwise SGLang's own
method runs, given a ``ProfileReq`` where the release needs one.

``sglang.Engine``'s calls take the same path (``engine.py``).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from rlprof_plugins.step_sources import trainer as trainer_step

from . import sessions
from ..base import Patch
from ..features import IN_PROCESS_CALLS
from .facts import VERSIONS
from .start_requests import server_config

# The fields a ProfileReq carries that a caller sets, by their native names.
_NOT_FIELDS = ("req_type", "type", "rid", "http_worker_ipc")


def _req_fields(req: Any) -> dict[str, Any]:
    """The fields of a ``ProfileReq`` (struct or dataclass) that hold a value."""
    names = getattr(type(req), "__struct_fields__", None) or [f.name for f in dataclasses.fields(req)]
    return {n: getattr(req, n) for n in names if n not in _NOT_FIELDS and getattr(req, n, None) not in (None, False)}


def _body(args: tuple, kwargs: dict) -> dict[str, Any]:
    """One call (``start_profile(req)`` or ``start_profile(**fields)``) as a body dict."""
    if args and args[0] is not None:
        return _req_fields(args[0])
    req = kwargs.get("req") or kwargs.get("obj")
    if req is not None:
        return _req_fields(req)
    return {k: v for k, v in kwargs.items() if v is not None}


def _takes_request(wrapped: Any) -> bool:
    import inspect

    return "req" in inspect.signature(wrapped).parameters


async def _native_start(wrapped, args: tuple, kwargs: dict):
    """SGLang's own start; the keyword form becomes a ``ProfileReq`` on releases that take one."""
    if kwargs and not args and _takes_request(wrapped) and "req" not in kwargs:
        from sglang.srt.managers.io_struct import ProfileReq

        return await wrapped(ProfileReq(**{k: v for k, v in kwargs.items() if v is not None}))
    return await wrapped(*args, **kwargs)


def _answer(result: dict) -> Any:
    """What SGLang's method returns: a ``ProfileReqOutput`` (the status as its message)."""
    from sglang.srt.managers.io_struct import ProfileReqOutput

    return ProfileReqOutput(success=True, message=json.dumps(result))


async def _rlprof_start(manager: Any, body: dict, config: Any):
    return _answer(await sessions.start(manager, body, config))


def _wrap_start(wrapped, instance, args, kwargs):
    body = _body(args, kwargs)
    config = server_config()
    # A trainer integration's step (verl's server actor) makes it an rlprof session, as a global_step would.
    if config is None and not sessions.uses_rlprof(body) and not trainer_step.active():
        return _native_start(wrapped, args, kwargs)
    return _rlprof_start(instance, body, config)


async def _rlprof_stop(manager: Any, wait: Any):
    return _answer(await sessions.stop(manager, wait))


def _wrap_stop(wrapped, instance, args, kwargs):
    if sessions.stop_is_native():
        return wrapped(*args, **kwargs)
    return _rlprof_stop(instance, kwargs.get("wait"))


TOKENIZER_PATCH = Patch(
    name="sglang.tokenizer.profile",
    engine="sglang",
    versions=VERSIONS,
    module="sglang.srt.managers.tokenizer_manager",
    feature=IN_PROCESS_CALLS,
    why=("in-process callers (verl, sglang.Engine) call TokenizerManager.start_profile, bypassing the routes; "
         "its keyword form raises TypeError from 0.5.15"),
    upstream="a tokenizer-manager profile call taking the same request as the route, with a completion signal",
    wrap={"TokenizerManager.start_profile": _wrap_start, "TokenizerManager.stop_profile": _wrap_stop},
    relies_on={"sglang.srt.managers.io_struct:ProfileReqOutput": "fields:success,message",
               "TokenizerManager.auto_create_handle_loop": "signature"},
)

PATCHES = (TOKENIZER_PATCH,)
