"""vLLM front ends: ``AsyncLLM`` and ``LLM`` start/stop with a global step.

``start_profile`` takes every start-request field as a keyword (rlprof's
``global_step``, ``step_start``, ...; vLLM's own; SGLang's ``num_steps``,
``output_dir``, ...: ``rlprof_plugins.config.request_fields``). The request is
parsed here once (``requests.parse_start``), before any engine process is
involved, then sent to every worker; the HTTP route hands its parsed request
to ``start`` directly. AsyncLLM also records
the API-server process (vLLM's "frontend" trace) into the same folder,
stopping it when the workers' window closes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
from pathlib import Path
from typing import Any

from rlprof_plugins.store import reaping as writers

from rlprof_plugins._log import session_event
from rlprof_plugins.session.protocol import (combine, file_piece, local_piece, roster_command, stop_wait_seconds,
                                    stop_when_written_sync, wait_until_written, with_step_manifest)
from rlprof_plugins.errors import UnavailableError
from rlprof_plugins.session.api_server_recorder import FrontendRecorder
from rlprof_plugins.store.layout import session_dir
from rlprof_plugins.config.request_fields import VLLM, needs_rlprof
from rlprof_plugins.config.requests import StartRequest, parse_start
from rlprof_plugins.trace.naming import vllm_frontend_name, vllm_worker_name

from ..base import Patch
from ..features import STEP_WINDOWS
from . import weight_version
from .engine_core import UTILITY
from .facts import VERSIONS
from .profiler_config import options_of, plugin_handles, profiler_config_of, request_server

RECORDER_ATTR = "_rlprof_frontend"


def _should_profile_frontend(cfg: Any) -> bool:
    """``ProfilerConfig.should_profile_frontend`` (newest releases) or its rule."""
    if hasattr(type(cfg), "should_profile_frontend"):
        return bool(cfg.should_profile_frontend)
    activities = getattr(cfg, "torch_profiler_activities", None)
    return (getattr(cfg, "profiler", None) == "torch" and not getattr(cfg, "ignore_frontend", False)
            and (activities is None or "CPU" in activities))


def _config(llm: Any) -> Any:
    return profiler_config_of(llm.vllm_config)


def call_fields(args: tuple, kwargs: dict) -> dict[str, Any]:
    """A ``start_profile(profile_prefix=None, **fields)`` call as request fields."""
    if len(args) > 1:
        raise TypeError(f"start_profile() takes at most 1 positional argument ({len(args)} given)")
    return {"profile_prefix": args[0], **kwargs} if args else dict(kwargs)


def _request(cfg: Any, fields: dict[str, Any], version: weight_version.Reader | None = None) -> StartRequest:
    return parse_start(fields, dataclasses.replace(request_server(cfg), weight_version=version))


# ---- AsyncLLM ------------------------------------------------------------
def _recorder(llm: Any) -> FrontendRecorder | None:
    cfg = _config(llm)
    # vLLM profiles the front end only with one API server (its own guard).
    if not _should_profile_frontend(cfg) or not getattr(llm, "_profile_session_guard_enabled", True):
        return None
    recorder = llm.__dict__.get(RECORDER_ATTR)
    if recorder is None:
        import dataclasses

        from rlprof_plugins.backends.torch_profiler import TorchProfilerBackend

        from .worker import torch_settings, with_overrides

        # The worker's settings, CPU only: the front end runs no device work.
        settings = dataclasses.replace(torch_settings(cfg), activities=("CPU",), table_sort_key="self_cpu_time_total",
                                       write_table=options_of(cfg).operator_table)
        base_name = vllm_frontend_name(socket.gethostname(), os.getpid())
        recorder = FrontendRecorder(
            backend_factory=lambda overrides: TorchProfilerBackend(
                with_overrides(settings, {k: v for k, v in (overrides or {}).items() if k != "activities"})),
            worker_name=lambda prefix: vllm_worker_name(prefix, base_name),
        )
        llm.__dict__[RECORDER_ATTR] = recorder
    return recorder


async def start(llm: Any, request: StartRequest) -> dict:
    """One parsed request on every worker (and the API-server trace); the
    route and ``AsyncLLM.start_profile`` both come here."""
    cfg = _config(llm)
    await asyncio.to_thread(writers.reap_all, Path(request.output_dir or cfg.torch_profiler_dir))
    replies = await llm.engine_core.call_utility_async(UTILITY, request.to_command())
    result = combine(replies)
    roster = roster_command(result)
    if roster is not None:  # a server spanning nodes: each folder's manifest names where the others write
        await llm.engine_core.call_utility_async(UTILITY, roster)
    recorder = _recorder(llm)
    if recorder is not None:
        directory = session_dir(request.output_dir or cfg.torch_profiler_dir, request.global_step)

        async def workers_active() -> bool:
            status = combine(await llm.engine_core.call_utility_async(UTILITY, {"op": "status"}))
            return status["state"] in ("waiting", "recording")

        info = None
        if request.global_step is not None:
            from .worker import manifest_header

            header = {**manifest_header(llm.vllm_config, cfg.torch_profiler_dir), "global_step": request.global_step}
            info = {"session_id": request.session_id, "header": header}
        await recorder.start(directory, request.profile_prefix, poll=workers_active if request.step_end else None,
                             manifest_info=info, session_id=request.session_id, overrides=request.torch_overrides)
    if request.warnings:
        result["warnings"] = list(request.warnings)
    session_event("started", result)
    return result


def _with_frontend(llm: Any, result: dict) -> dict:
    """Fold the API-server trace into the workers' status: a session is done
    only when its frontend trace is written too."""
    recorder = llm.__dict__.get(RECORDER_ATTR)
    if recorder is None or recorder.state == "idle" or recorder.session_id != result.get("session_id"):
        return result  # no frontend trace for this session (or it belongs to a newer one)
    result["frontend"] = recorder.summary()
    result["files"] = result.get("files", []) + recorder.files
    if result["state"] == "done" and recorder.state in ("recording", "exporting"):
        result["state"] = "exporting"
    if recorder.error:
        result.setdefault("errors", []).append(f"frontend: {recorder.error}")
    return result


async def _async_stop(llm: Any, wait: Any = None) -> dict:
    timeout = stop_wait_seconds(options_of(_config(llm)), wait)
    recorder = llm.__dict__.get(RECORDER_ATTR)
    if recorder is not None:
        recorder.stop_soon()  # its export runs beside the workers'
    result = _with_frontend(llm, combine(await llm.engine_core.call_utility_async(UTILITY, {"op": "stop"})))
    if timeout:
        result = await wait_until_written(with_step_manifest(result), lambda step: _async_status(llm, step), timeout)
    session_event("stopped", result)
    return result


async def _async_status(llm: Any, global_step: int | None = None) -> dict:
    command = {"op": "status", "global_step": global_step}
    return with_step_manifest(_with_frontend(llm, combine(await llm.engine_core.call_utility_async(UTILITY, command))))


def file_reader(llm: Any, global_step: int, rank: str, path: str, length: int):
    """``read_piece(offset)`` for ``GET /profile_file``: a rank's file read by
    that rank's own worker, wherever its node is (the API server's trace from
    this process's disk)."""
    async def read_piece(offset: int) -> dict:
        if rank == "frontend":
            return local_piece(await _async_status(llm, global_step), rank, path, offset, length)
        command = {"op": "read", "global_step": global_step, "rank": rank, "path": path, "offset": offset,
                   "length": length}
        return file_piece(await llm.engine_core.call_utility_async(UTILITY, command), rank, path)

    return read_piece


def _wrap_async_start(wrapped, instance, args, kwargs):
    cfg = _config(instance)
    if not plugin_handles(cfg):
        if needs_rlprof(VLLM, kwargs):
            raise UnavailableError(STEP_WINDOWS, 'needs "profiler": "torch" with a local torch_profiler_dir')
        return wrapped(*args, **kwargs)
    fields = call_fields(args, kwargs)
    if weight_version.wanted(options_of(cfg), fields):
        return _start_at_weight_version(instance, cfg, fields)
    return start(instance, _request(cfg, fields))


async def _start_at_weight_version(llm: Any, cfg: Any, fields: dict[str, Any]) -> dict:
    return await start(llm, _request(cfg, fields, await weight_version.read_async(llm)))


def _wrap_async_stop(wrapped, instance, args, kwargs):
    if not plugin_handles(_config(instance)):
        return wrapped(*args, **kwargs)
    return _async_stop(instance, *args, **kwargs)


def _wrap_async_shutdown(wrapped, instance, args, kwargs):
    recorder = instance.__dict__.get(RECORDER_ATTR)
    if recorder is not None:
        recorder.shutdown()
    return wrapped(*args, **kwargs)


async def profile_status(self, global_step: int | None = None) -> dict:
    """rlprof: the state of the current (or the given step's) session on every rank."""
    return await _async_status(self, global_step)


# ---- LLM (synchronous, in-process) ----------------------------------------
def _call_sync(llm: Any, command: dict) -> list:
    client = llm.llm_engine.engine_core
    if hasattr(client, "call_utility"):
        return client.call_utility(UTILITY, command)
    return client.engine_core.rlprof_control(command)  # InprocClient: EngineCore in this process


def _wrap_llm_start(wrapped, instance, args, kwargs):
    cfg = _config(instance.llm_engine)
    if not plugin_handles(cfg):
        if needs_rlprof(VLLM, kwargs):
            raise UnavailableError(STEP_WINDOWS, 'needs "profiler": "torch" with a local torch_profiler_dir')
        return wrapped(*args, **kwargs)
    fields = call_fields(args, kwargs)
    version = weight_version.read_sync(instance.llm_engine) if weight_version.wanted(options_of(cfg), fields) else None
    request = _request(cfg, fields, version)
    writers.reap_all(Path(request.output_dir or cfg.torch_profiler_dir))
    result = combine(_call_sync(instance, request.to_command()))
    roster = roster_command(result)
    if roster is not None:
        _call_sync(instance, roster)
    if request.warnings:
        result["warnings"] = list(request.warnings)
    session_event("started", result)
    return result


def _wrap_llm_stop(wrapped, instance, args, kwargs):
    cfg = _config(instance.llm_engine)
    if not plugin_handles(cfg):
        return wrapped(*args, **kwargs)

    def stop(wait=None):
        result = stop_when_written_sync(lambda command: _call_sync(instance, command), options_of(cfg), wait)
        session_event("stopped", result)
        return result

    return stop(*args, **kwargs)


def llm_profile_status(self, global_step: int | None = None) -> dict:
    """rlprof: the state of the current (or the given step's) session on every rank."""
    return with_step_manifest(combine(_call_sync(self, {"op": "status", "global_step": global_step})))


ASYNC_LLM_PATCH = Patch(
    name="vllm.frontend.async_llm",
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
    name="vllm.frontend.llm",
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
