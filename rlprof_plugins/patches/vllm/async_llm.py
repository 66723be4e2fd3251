"""Patch module (API server, or the trainer's process): ``AsyncLLM`` and ``LLM`` start/stop with a global step.

vLLM calls these classes its "frontend". ``start_profile`` takes every
start-request field as a keyword (rlprof's ``global_step``, ``step_start``,
...; vLLM's own; SGLang's ``num_steps``, ``output_dir``, ...:
``rlprof_plugins.config.request_fields``). The request is parsed here once
(``requests.parse_start``), before any engine process is involved; the
session itself (every worker, and the API-server trace) is the ``sessions``
helper's, which the HTTP routes use too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlprof_plugins._log import session_event
from rlprof_plugins.config.request_fields import VLLM, needs_rlprof
from rlprof_plugins.errors import UnavailableError
from rlprof_plugins.session.protocol import combine, roster_command, stop_when_written_sync, with_step_manifest
from rlprof_plugins.store import reaping

from ..base import Patch
from ..features import STEP_WINDOWS
from . import sessions, weight_reader
from .config import options_of, plugin_handles, root_of

NEEDS = 'needs "profiler": "torch" with a local torch_profiler_dir, or "profiler": "cuda"'
from .facts import VERSIONS


def _wrap_async_start(wrapped, instance, args, kwargs):
    cfg = sessions.config_of(instance)
    if not plugin_handles(cfg):
        if needs_rlprof(VLLM, kwargs):
            raise UnavailableError(STEP_WINDOWS, NEEDS)
        return wrapped(*args, **kwargs)
    fields = sessions.call_fields(args, kwargs)
    if weight_reader.wanted(options_of(cfg), fields):
        return _start_at_weight_version(instance, cfg, fields)
    return sessions.start(instance, sessions.start_request(cfg, fields))


async def _start_at_weight_version(llm: Any, cfg: Any, fields: dict[str, Any]) -> dict:
    return await sessions.start(llm, sessions.start_request(cfg, fields, await weight_reader.read_async(llm)))


def _wrap_async_stop(wrapped, instance, args, kwargs):
    if not plugin_handles(sessions.config_of(instance)):
        return wrapped(*args, **kwargs)
    return sessions.stop(instance, *args, **kwargs)


def _wrap_async_shutdown(wrapped, instance, args, kwargs):
    recorder = instance.__dict__.get(sessions.RECORDER_ATTR)
    if recorder is not None:
        recorder.shutdown()
    return wrapped(*args, **kwargs)


async def profile_status(self, global_step: int | None = None) -> dict:
    """rlprof: the state of the current (or the given step's) session on every rank."""
    return await sessions.status(self, global_step)


def _wrap_llm_start(wrapped, instance, args, kwargs):
    cfg = sessions.config_of(instance.llm_engine)
    if not plugin_handles(cfg):
        if needs_rlprof(VLLM, kwargs):
            raise UnavailableError(STEP_WINDOWS, NEEDS)
        return wrapped(*args, **kwargs)
    fields = sessions.call_fields(args, kwargs)
    version = weight_reader.read_sync(instance.llm_engine) if weight_reader.wanted(options_of(cfg), fields) else None
    request = sessions.start_request(cfg, fields, version)
    reaping.reap_all(Path(request.output_dir or root_of(cfg)))
    result = combine(sessions.call_sync(instance, request.to_command()))
    roster = roster_command(result)
    if roster is not None:
        sessions.call_sync(instance, roster)
    if request.warnings:
        result["warnings"] = list(request.warnings)
    session_event("started", result)
    return result


def _wrap_llm_stop(wrapped, instance, args, kwargs):
    cfg = sessions.config_of(instance.llm_engine)
    if not plugin_handles(cfg):
        return wrapped(*args, **kwargs)

    def stop(wait=None):
        result = stop_when_written_sync(lambda command: sessions.call_sync(instance, command), options_of(cfg), wait)
        session_event("stopped", result)
        return result

    return stop(*args, **kwargs)


def llm_profile_status(self, global_step: int | None = None) -> dict:
    """rlprof: the state of the current (or the given step's) session on every rank."""
    return with_step_manifest(combine(sessions.call_sync(self, {"op": "status", "global_step": global_step})))


ASYNC_LLM_PATCH = Patch(
    name="vllm.async_llm.async_llm",
    engine="vllm",
    versions=VERSIONS,
    module="vllm.v1.engine.async_llm",
    feature=STEP_WINDOWS,
    why="AsyncLLM.start_profile takes no global step and cannot report session state",
    upstream="start_profile(request) with a global step and a status method",
    wrap={
        "AsyncLLM.start_profile": _wrap_async_start,
        "AsyncLLM.stop_profile": _wrap_async_stop,
        "AsyncLLM.shutdown": _wrap_async_shutdown,
    },
    add={"AsyncLLM.profile_status": profile_status},
    relies_on={
        "vllm.v1.engine.core_client:AsyncMPClient.call_utility_async": "signature",
        "vllm.config.profiler:validate_profile_prefix": "signature",
    },
)

LLM_PATCH = Patch(
    name="vllm.async_llm.llm",
    engine="vllm",
    versions=VERSIONS,
    module="vllm.entrypoints.llm",
    feature=STEP_WINDOWS,
    why="LLM.start_profile takes no global step and cannot report session state",
    upstream="the same as for AsyncLLM",
    wrap={"LLM.start_profile": _wrap_llm_start, "LLM.stop_profile": _wrap_llm_stop},
    add={"LLM.profile_status": llm_profile_status},
    relies_on={
        "vllm.v1.engine.core_client:SyncMPClient.call_utility": "signature",
        "vllm.v1.engine.core_client:InprocClient": "present",
        "vllm.config.profiler:validate_profile_prefix": "signature",
    },
)

PATCHES = (ASYNC_LLM_PATCH, LLM_PATCH)
