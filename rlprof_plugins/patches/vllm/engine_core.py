"""Patch module (EngineCore process): one utility method that carries rlprof commands to workers.

vLLM's ``profile`` utility passes only ``(is_start, prefix, delay, max)``.
Our commands (global step, window, status) are dicts, so EngineCore gets a
``rlprof_control`` utility that forwards a dict to every worker through
``collective_rpc`` and returns their replies. It runs on the engine loop
between steps, like ``profile``.

It also forwards each weight version the engine is given
(``EngineCore.set_weight_version``, 0.32+) to every worker, where the step
metrics turn it into the RL step (``worker_hooks.STEP_METRICS``).

A stop is answered before torch's profiler stops (that stop takes seconds
with stacks on and must run on the thread that recorded): in an engine
process with a busy loop, workers only mark the session stopped, and the
profiler stops at the worker's next iteration or, when no request comes,
from an idle callback of the busy loop right after the answer went out.
An in-process ``EngineCore`` (no busy loop) stops at once.
"""

from __future__ import annotations

import time
from typing import Any

from rlprof_plugins._log import logger

from ..base import Patch
from ..features import STEP_WINDOWS
from .control import UTILITY, with_engine_state
from .worker_hooks import worker_control
from .facts import VERSIONS


def _has_idle_callbacks(engine: Any) -> bool:
    """Only ``EngineCoreProc``'s busy loop runs the idle callbacks."""
    return isinstance(getattr(engine, "_idle_state_callbacks", None), list) and hasattr(engine, "input_queue")


def _let_answer_go(engine: Any, timeout: float = 0.2) -> None:
    """Give the output thread a moment to send the stop's answer: torch's
    stop can hold the GIL, and a queued answer would wait for it."""
    out = getattr(engine, "output_queue", None)
    deadline = time.monotonic() + timeout
    while out is not None and not out.empty() and time.monotonic() < deadline:
        time.sleep(0.002)


def _complete_stop(engine: Any) -> None:
    """Idle callback: stop the workers' profilers whose stop was answered."""
    _let_answer_go(engine)
    try:
        engine.model_executor.collective_rpc(worker_control, args=({"op": "complete_stop"},))
    except Exception as e:  # never raised into the loop; the worker logs its own failures
        logger.warning("rlprof: completing a deferred profiler stop failed: %s", e)


def rlprof_control(self: Any, command: dict) -> list[dict]:
    command = with_engine_state(self, command)
    defer = command.get("op") == "stop" and _has_idle_callbacks(self)
    if defer:
        command = {**command, "defer": True}
    try:
        replies = list(self.model_executor.collective_rpc(worker_control, args=(command,)))
    except Exception as e:  # reported to the caller, never raised into the loop
        return [{"ok": False, "error": f"{type(e).__name__}: {e}"}]
    if defer and any(isinstance(r, dict) and r.get("stop_pending") for r in replies):
        self._idle_state_callbacks.append(_complete_stop)
    return replies


def _set_weight_version(wrapped, instance, args, kwargs):
    """The weight version moved: every worker's step metrics follow it (``step_source: weight_version``)."""
    out = wrapped(*args, **kwargs)
    version = args[0] if args else kwargs.get("weight_version")
    try:
        instance.model_executor.collective_rpc(worker_control, args=({"op": "weight_version", "version": version},))
    except Exception as e:  # never raised into the loop: the metrics keep the step they had
        logger.warning("rlprof: the workers' step metrics did not get weight version %r: %s", version, e)
    return out


ENGINE_CORE_PATCH = Patch(
    name="vllm.engine_core.control",
    engine="vllm",
    versions=VERSIONS,
    module="vllm.v1.engine.core",
    feature=STEP_WINDOWS,
    why="the native profile utility cannot carry a global step or a status query; the workers never see the "
        "weight version a trainer sets (step metrics follow it)",
    upstream="a profile utility taking a request object",
    add={"EngineCore." + UTILITY: rlprof_control},
    # the weight version, kept here from 0.32, moves the workers' step metrics
    wrap={"EngineCore.set_weight_version": _set_weight_version},
    optional=("EngineCore.set_weight_version",),
    relies_on={
        "vllm.v1.executor.abstract:Executor.collective_rpc": "signature",
        # the busy loop's idle callbacks complete a deferred stop (0.17+)
        "EngineCoreProc._notify_idle_state_callbacks": "present",
    },
)

PATCHES = (ENGINE_CORE_PATCH,)
