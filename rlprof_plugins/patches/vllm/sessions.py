"""Helper: a session as the API server (or an in-process ``LLM``) runs it over vLLM's engine client.

Not a patch module. ``start`` sends one parsed request to every worker
through the EngineCore utility and records the API-server process (vLLM's
"frontend" trace) into the same folder, stopping it when the workers' window
closes; ``stop`` and ``status`` fold that trace into the workers' answers;
``file_reader`` serves ``GET /profile_file``. The ``async_llm`` patch module
(``AsyncLLM``/``LLM``) and the ``api_router`` patch module (the HTTP routes)
both come here, so a route and an in-process call run the same session.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
from pathlib import Path
from typing import Any

from rlprof_plugins._log import session_event
from rlprof_plugins.config.requests import StartRequest, parse_start
from rlprof_plugins.errors import ConflictError
from rlprof_plugins.session.api_server_recorder import FrontendRecorder
from rlprof_plugins.session.protocol import (combine, file_piece, ignored_as_native, local_piece, roster_command,
                                             stop_wait_seconds, wait_until_written, with_step_manifest)
from rlprof_plugins.store import reaping
from rlprof_plugins.store.layout import session_dir
from rlprof_plugins.trace.format.naming import vllm_frontend_name, vllm_worker_name

from . import request_keeper, weight_reader
from .config import options_of, profiler_config_of, request_server, root_of
from .control import UTILITY, manifest_header, torch_settings, with_overrides


RECORDER_ATTR = "_rlprof_frontend"


def _should_profile_frontend(cfg: Any) -> bool:
    """``ProfilerConfig.should_profile_frontend`` (newest releases) or its rule."""
    if hasattr(type(cfg), "should_profile_frontend"):
        return bool(cfg.should_profile_frontend)
    activities = getattr(cfg, "torch_profiler_activities", None)
    return (getattr(cfg, "profiler", None) == "torch" and not getattr(cfg, "ignore_frontend", False)
            and (activities is None or "CPU" in activities))


def config_of(llm: Any) -> Any:
    return profiler_config_of(llm.vllm_config)


def call_fields(args: tuple, kwargs: dict) -> dict[str, Any]:
    """A ``start_profile(profile_prefix=None, **fields)`` call as request fields."""
    if len(args) > 1:
        raise TypeError(f"start_profile() takes at most 1 positional argument ({len(args)} given)")
    return {"profile_prefix": args[0], **kwargs} if args else dict(kwargs)


def start_request(cfg: Any, fields: dict[str, Any], version: weight_reader.Reader | None = None) -> StartRequest:
    return parse_start(fields, dataclasses.replace(request_server(cfg), weight_version=version))


# ---- AsyncLLM ------------------------------------------------------------
def _recorder(llm: Any) -> FrontendRecorder | None:
    cfg = config_of(llm)
    # vLLM profiles the front end only with one API server (its own guard).
    if not _should_profile_frontend(cfg) or not getattr(llm, "_profile_session_guard_enabled", True):
        return None
    recorder = llm.__dict__.get(RECORDER_ATTR)
    if recorder is None:
        from rlprof_plugins.backends.torch_profiler import TorchProfilerBackend, with_python_stacks

        # The worker's settings, CPU only: the front end runs no device work.
        settings = dataclasses.replace(torch_settings(cfg), activities=("CPU",), table_sort_key="self_cpu_time_total",
                                       write_table=options_of(cfg).operator_table)
        base_name = vllm_frontend_name(socket.gethostname(), os.getpid())
        keys = options_of(cfg).backend_keys
        recorder = FrontendRecorder(  # sampled stacks sample the engine threads: the front end records none
            backend_factory=lambda overrides: TorchProfilerBackend(dataclasses.replace(with_python_stacks(
                with_overrides(settings, {k: v for k, v in (overrides or {}).items()
                                          if k not in ("activities", "python_stacks", "sample_hz")}), keys, overrides),
                sample_hz=None)),
            worker_name=lambda prefix: vllm_worker_name(prefix, base_name),
        )
        llm.__dict__[RECORDER_ATTR] = recorder
    return recorder


async def on_every_engine(llm: Any, command: dict) -> list:
    """Every worker's reply to ``command``. A data-parallel server runs an engine per data-parallel rank, each
    answering for its own workers; vLLM's client sends a utility call to every engine but hands back only the
    first one's answer, so where it can ask them all (``call_utility_all_async``) the answers are joined."""
    client = llm.engine_core
    every = getattr(client, "call_utility_all_async", None)
    if every is not None and len(getattr(client, "core_engines", None) or ()) > 1:
        return [reply for replies in await every(UTILITY, command) for reply in replies]
    return await client.call_utility_async(UTILITY, command)


async def start(llm: Any, request: StartRequest) -> dict:
    """One parsed request on every worker (and the API-server trace); the
    route and ``AsyncLLM.start_profile`` both come here."""
    cfg = config_of(llm)
    await asyncio.to_thread(reaping.reap_all, Path(request.output_dir or root_of(cfg)))
    replies = await on_every_engine(llm, request.to_command())
    result = combine(replies)  # a second start is a 409, as vLLM's own route answers it
    roster = roster_command(result)
    if roster is not None:  # a server spanning nodes: each folder's manifest names where the others write
        await on_every_engine(llm, roster)
    recorder = _recorder(llm)
    if recorder is not None:
        directory = session_dir(request.output_dir or root_of(cfg), request.global_step)

        async def workers_active() -> bool:
            status = combine(await on_every_engine(llm, {"op": "status"}))
            return status["state"] in ("waiting", "recording")

        info = None
        if request.global_step is not None:
            header = {**manifest_header(llm.vllm_config, root_of(cfg)), "global_step": request.global_step}
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


async def stop(llm: Any, wait: Any = None) -> dict:
    timeout = stop_wait_seconds(options_of(config_of(llm)), wait)
    recorder = llm.__dict__.get(RECORDER_ATTR)
    if recorder is not None:
        recorder.stop_soon()  # its export runs beside the workers'
    try:
        result = _with_frontend(llm, combine(await on_every_engine(llm, {"op": "stop"})))
    except ConflictError as e:  # nothing running: vLLM's own profiler ignores the stop; ``wait`` is rlprof's
        if wait is not None:
            raise
        return ignored_as_native(e, "stop")
    if timeout:
        result = await wait_until_written(with_step_manifest(result), lambda step: status(llm, step), timeout)
    session_event("stopped", result)
    return result


async def status(llm: Any, global_step: int | None = None) -> dict:
    command = {"op": "status", "global_step": global_step}
    return with_step_manifest(_with_frontend(llm, combine(await on_every_engine(llm, command))))


async def mark_step(llm: Any, weights_version: int, *, trainer: str, measure_dir: str | None = None) -> list:
    """A trainer integration's weight sync (verl's ``set_global_steps``): every worker's step metrics
    count for the version + ``trainer_step_offset`` from now on. ``measure_dir``: the trainer's folder for
    this server, where its step metrics go if the engine was launched without a profiler directory; the
    requests that held each step are followed there too."""
    command = {"op": "mark_step", "weights_version": weights_version, "trainer": trainer}
    if measure_dir is not None:
        command["measure_dir"] = measure_dir
        request_keeper.follow_at(llm, measure_dir)
    return await on_every_engine(llm, command)


def file_reader(llm: Any, global_step: int, rank: str, path: str, length: int):
    """``read_piece(offset)`` for ``GET /profile_file``: a rank's file read by
    that rank's own worker, wherever its node is (the API server's trace from
    this process's disk)."""
    async def read_piece(offset: int) -> dict:
        if rank == "frontend":
            return local_piece(await status(llm, global_step), rank, path, offset, length)
        command = {"op": "read", "global_step": global_step, "rank": rank, "path": path, "offset": offset,
                   "length": length}
        return file_piece(await on_every_engine(llm, command), rank, path)

    return read_piece


# ---- LLM (synchronous, in-process) ----------------------------------------
def call_sync(llm: Any, command: dict) -> list:
    client = llm.llm_engine.engine_core
    if hasattr(client, "call_utility"):
        return client.call_utility(UTILITY, command)
    return client.engine_core.rlprof_control(command)  # InprocClient: EngineCore in this process
