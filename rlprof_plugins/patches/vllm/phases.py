"""Patch module (EngineCore process): the RL phases a trainer asks of the engine, timed into every worker's step.

Between rollouts a trainer calls the engine core, through ``AsyncLLM``'s or
``LLM``'s utility calls: ``reset_prefix_cache``, ``pause_scheduler`` and
``resume_scheduler`` (what ``pause_generation``/``resume_generation``
reach), ``sleep`` and ``wake_up``, and weight updates through
``collective_rpc`` (a worker method whose name holds ``weight``, such as
verl's ``update_weights_from_ipc``). Each wrapper runs vLLM's own method
unchanged and times it on the engine core's thread; the record then goes to
every worker (``worker_control``'s ``phase``), where the step metrics keep it
in the rank's open step. A call that answers with a future (a pause that
waits for requests to finish) is timed until the future is done: vLLM
completes it from the engine core's idle callbacks, on the same thread. A
future done on any other thread is not recorded (one warning): the executor's
channel to the workers is the engine core thread's alone.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Any

from rlprof_plugins._log import logger, warn_once
from rlprof_plugins.metrics import phases
from rlprof_plugins.metrics.phases import PhaseRecord

from ..base import Patch
from ..features import RL_PHASES
from .facts import BELOW, WEIGHT_VERSION_FIRST
from .worker_hooks import worker_control

PHASE_VERSIONS = f">={WEIGHT_VERSION_FIRST},<{BELOW}"  # the engine core's pause, sleep and wake-up as verl calls them


def _to_workers(engine: Any, record: PhaseRecord) -> None:
    """The record to every worker's step metrics (never raised into the engine: the call is done)."""
    try:
        engine.model_executor.collective_rpc(worker_control, args=({"op": "phase", "record": record.to_json()},))
    except Exception as e:
        logger.warning("rlprof: the %s phase (%s) did not reach the workers' step metrics: %s: %s", record.phase,
                       record.call, type(e).__name__, e)


def _timed(engine: Any, phase: str, call: str, wrapped, args, kwargs, detail: str | None = None):
    """vLLM's call, its answer unchanged; a future answered is timed until it is done."""
    started_at, started = time.time(), time.perf_counter()
    out = wrapped(*args, **kwargs)
    engine_thread = threading.get_ident()

    def deliver(_done: Any = None) -> None:
        if threading.get_ident() != engine_thread:
            warn_once(f"phase on another thread {call}", "rlprof: the %s phase (%s) ended on another thread than the "
                      "engine core's and is not recorded", phase, call)
            return
        _to_workers(engine, PhaseRecord(phase, call, started_at, (time.perf_counter() - started) * 1e3,
                                        detail=detail))

    if isinstance(out, Future):
        out.add_done_callback(deliver)
    else:
        deliver()
    return out


def _argument(args, kwargs, position: int, name: str) -> Any:
    return args[position] if len(args) > position else kwargs.get(name)


def _reset_prefix_cache(wrapped, instance, args, kwargs):
    return _timed(instance, phases.CACHE_RESET, "reset_prefix_cache", wrapped, args, kwargs)


def _pause_scheduler(wrapped, instance, args, kwargs):
    mode = _argument(args, kwargs, 0, "mode")
    return _timed(instance, phases.PAUSE, "pause_scheduler", wrapped, args, kwargs,
                  f"mode={mode}" if mode is not None else None)


def _resume_scheduler(wrapped, instance, args, kwargs):
    return _timed(instance, phases.RESUME, "resume_scheduler", wrapped, args, kwargs)


def _sleep(wrapped, instance, args, kwargs):
    level = _argument(args, kwargs, 0, "level")
    return _timed(instance, phases.SLEEP, "sleep", wrapped, args, kwargs, f"level={1 if level is None else level}")


def _wake_up(wrapped, instance, args, kwargs):
    tags = _argument(args, kwargs, 0, "tags")
    return _timed(instance, phases.WAKE_UP, "wake_up", wrapped, args, kwargs,
                  f"tags={','.join(map(str, tags))}" if tags else None)


def _collective_rpc(wrapped, instance, args, kwargs):
    method = _argument(args, kwargs, 0, "method")
    name = method if isinstance(method, str) else getattr(method, "__name__", "")
    if "weight" not in name:  # only weight updates are a phase; every other call runs as it is
        return wrapped(*args, **kwargs)
    return _timed(instance, phases.WEIGHT_UPDATE, f"collective_rpc:{name}", wrapped, args, kwargs)


PHASES_PATCH = Patch(
    name="vllm.phases.engine_core",
    engine="vllm",
    versions=PHASE_VERSIONS,
    module="vllm.v1.engine.core",
    feature=RL_PHASES,
    why="time the cache resets, pauses, resumes, sleeps, wake-ups and weight updates a trainer asks of the "
        "engine, into each rank's step",
    upstream="per-rank timings of these calls in vLLM's own metrics",
    wrap={"EngineCore.reset_prefix_cache": _reset_prefix_cache, "EngineCore.pause_scheduler": _pause_scheduler,
          "EngineCoreProc.pause_scheduler": _pause_scheduler, "EngineCore.resume_scheduler": _resume_scheduler,
          "EngineCoreProc.resume_scheduler": _resume_scheduler, "DPEngineCoreProc.resume_scheduler": _resume_scheduler,
          "EngineCore.sleep": _sleep, "EngineCore.wake_up": _wake_up, "EngineCore.collective_rpc": _collective_rpc},
    # the engine core process overrides pause and resume (a data-parallel one resume again)
    optional=("EngineCoreProc.pause_scheduler", "EngineCoreProc.resume_scheduler", "DPEngineCoreProc.resume_scheduler"),
    relies_on={"vllm.v1.executor.abstract:Executor.collective_rpc": "signature"},
)

PATCHES = (PHASES_PATCH,)
