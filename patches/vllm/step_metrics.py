"""Helper: each vLLM worker's step metrics (``step_metrics``), and the RL step they follow.

Not a patch module: the worker hooks (``worker_hooks``) time every model
execution through it, recorded or not, and the control path moves the step:
a start naming a ``global_step`` (``control.worker_control``), and the
engine's weight version, which lives in the EngineCore process, not in the
workers: the ``engine_core`` patch forwards each ``set_weight_version`` to
every worker as a ``weight_version`` command. The recorder is built once per
worker from its profiler config, into its root (``config.root_of``); none with
``step_metrics: false``, or when the config is not rlprof's.
"""

from __future__ import annotations

from typing import Any, Callable

from rlprof_plugins._log import logger
from rlprof_plugins.session.step_recorder import StepRecorder, recorder_for
from rlprof_plugins.trace.naming import rank_label

from .config import options_of, plugin_handles, root_of

RECORDER_ATTR = "_rlprof_step_recorder"
STEP_OPS = ("weight_version", "mark_step")  # commands for the recorder, not the profiling session


def recorder_of(worker: Any, read_config: Callable[[], Any]) -> StepRecorder | None:
    """The worker's recorder, built on its first model execution (or command) from the config
    ``read_config`` gives; None when off."""
    found = worker.__dict__.get(RECORDER_ATTR)
    if found is not None:
        return found or None
    recorder = None
    try:
        config = read_config()
        if config is not None and plugin_handles(config):
            recorder = recorder_for(root_of(config), rank_label(worker.rank),
                                    options_of(config))
    except Exception as e:  # never into the engine loop: step metrics are off for this worker
        logger.warning("rlprof: step metrics off on this worker: %s: %s", type(e).__name__, e)
        recorder = None
    worker.__dict__[RECORDER_ATTR] = recorder if recorder is not None else False
    return recorder


def step_command(worker: Any, config: Any, command: dict) -> dict:
    """``weight_version`` (from the EngineCore) or ``mark_step`` (a trainer's mark) on one worker
    (which may not have run a model yet: a trainer sets the first version before any traffic)."""
    recorder = recorder_of(worker, lambda: config)
    if recorder is None:
        return {"ok": True, "step_metrics": False}
    if command["op"] == "weight_version":
        recorder.weight_version(command.get("version"))
    else:
        recorder.mark(int(command["global_step"]))
    return {"ok": True, "step_metrics": True, "global_step": recorder.metrics.step}


def started(worker: Any, config: Any, command: dict, reply: dict) -> None:
    """A start that went through names its step: the recorder counts for it from now on."""
    if command.get("op") == "start" and isinstance(reply, dict) and reply.get("ok"):
        recorder = recorder_of(worker, lambda: config)
        if recorder is not None:
            recorder.started(command.get("global_step"))
