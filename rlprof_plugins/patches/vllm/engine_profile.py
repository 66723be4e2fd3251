"""Patch module (EngineCore process): vLLM EngineCore's own ``profile`` utility as rlprof sessions: the way in for callers without rlprof's routes.

vLLM's Rust frontend (``VLLM_USE_RUST_FRONTEND=1``, ``vllm-rs``) serves
``/start_profile`` and ``/stop_profile`` itself and forwards only
``profile_prefix``, ``delay_iterations`` and ``max_iterations`` to the engine's
``profile`` utility; an in-process ``LLMEngine.start_profile`` calls the same
utility. Left alone the call reaches the workers' ``profile`` (rlprof's
sessions, but with no global step). Here it becomes one rlprof start parsed
in the EngineCore process, which holds the engine's weight version: with
``step_source: weight_version`` (or ``profile_prefix``, a
``global_step_<N>`` prefix) the session records into its step folder, with
the configured window, stages, chunks, manifest and merge. A stop keeps the
native promise (the files are on disk when the call returns): the profiler
stops in the call and the call waits for the export, at most
``stop_wait_seconds`` (0: it returns at once); vLLM's own stop holds the
loop for its export the same way. What cannot reach the engine (the body's
``global_step``, a status route, 400s naming a field) is said at start-up
(``patches/bypassing_frontends.py``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rlprof_plugins._log import logger, session_event, warn_once
from rlprof_plugins.errors import UnavailableError
from rlprof_plugins.config.requests import parse_start
from rlprof_plugins.session.protocol import combine, stop_when_written_sync

from ..base import Patch
from ..features import STEP_WINDOWS
from .config import options_of, plugin_handles, profiler_config_of, request_server
from .control import with_engine_state
from .worker_hooks import worker_control
from .facts import VERSIONS


def _bind(is_start: bool = True, profile_prefix: str | None = None, delay_iterations: int | None = None,
          max_iterations: int | None = None, profiler_kwargs: dict | None = None) -> tuple:
    """``EngineCore.profile``'s arguments on every release (0.33 adds ``profiler_kwargs``)."""
    return is_start, {"profile_prefix": profile_prefix, "delay_iterations": delay_iterations,
                      "max_iterations": max_iterations, "profiler_kwargs": profiler_kwargs}


def _workers(engine: Any, command: dict) -> list:
    return list(engine.model_executor.collective_rpc(worker_control, args=(with_engine_state(engine, command),)))


def _weight_version(engine: Any):
    getter = getattr(engine, "get_weight_version", None)
    return getter if callable(getter) else None


def _profile(wrapped, instance, args, kwargs):
    cfg = profiler_config_of(instance.vllm_config)
    if not plugin_handles(cfg):
        return wrapped(*args, **kwargs)
    try:
        return _session(instance, cfg, *_bind(*args, **kwargs))
    except UnavailableError as e:  # the workers' hooks did not apply here: vLLM's own profiler, as without rlprof
        warn_once("engine_profile:unavailable", "rlprof: %s; EngineCore.profile runs vLLM's own profiler", e)
        return wrapped(*args, **kwargs)


def _session(instance: Any, cfg: Any, is_start: bool, fields: dict) -> None:
    if not is_start:  # the profiler stops here, on the engine loop
        session_event("stopped", stop_when_written_sync(lambda command: _workers(instance, command), options_of(cfg)))
        return None
    server = dataclasses.replace(request_server(cfg), weight_version=_weight_version(instance))
    request = parse_start({k: v for k, v in fields.items() if v is not None}, server)
    for warning in request.warnings:  # this caller has no answer body to carry them
        logger.warning("rlprof: %s", warning)
    session_event("started", combine(_workers(instance, request.to_command())))
    return None


ENGINE_PROFILE_PATCH = Patch(
    name="vllm.engine_profile.utility",
    engine="vllm",
    versions=VERSIONS,
    module="vllm.v1.engine.core",
    feature=STEP_WINDOWS,
    why=("vLLM's Rust frontend and LLMEngine reach the engine only through its profile utility "
         "(prefix, delay, max): run an rlprof session from there, with the engine's weight version as its step"),
    upstream="a profile utility taking a request object (vllm#57875: per-session controls in both frontends)",
    wrap={"EngineCore.profile": _profile},
    relies_on={"vllm.v1.executor.abstract:Executor.collective_rpc": "signature"},
)

PATCHES = (ENGINE_PROFILE_PATCH,)
