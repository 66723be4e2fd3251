"""Helper: each SGLang scheduler's step metrics (``step_metrics``), and the RL step they follow.

Not a patch module: the ``scheduler`` patch module times every batch that
runs the model through it, recorded or not. The recorder is built once per
scheduler from the launch configuration (none without a configured
``torch_profiler_dir`` or with ``step_metrics: false``) and held beside the
controller; the RL step moves with the scheduler's own copy of the weight
version (``weight_reader.scheduler_reader``: read each batch, parsed only
when it changed) and with every start that names a ``global_step``.
"""

from __future__ import annotations

import sys
from typing import Any

from rlprof_plugins._log import logger
from rlprof_plugins.config.launch_config import from_environment
from rlprof_plugins.session.step_recorder import StepRecorder, recorder_for
from rlprof_plugins.trace.naming import sglang_rank_label

from .control import parallel_of
from .weight_reader import scheduler_reader

RECORDER_ATTR = "_rlprof_step_recorder"
_OFF = False  # cached: this scheduler records no step metrics


def recorder_of(scheduler: Any, module: Any = None) -> StepRecorder | None:
    """The scheduler's recorder, built on its first batch or command; None when off (or when building
    it failed). ``scheduler``: the scheduler, or its profiler manager with the scheduler's ``module``."""
    manager = getattr(scheduler, "profiler_manager", None) or scheduler
    found = manager.__dict__.get(RECORDER_ATTR)
    if found is not None:
        return found or None
    recorder = None
    try:
        config = from_environment()
        if config is not None:
            module = module or sys.modules[type(scheduler).__module__]
            recorder = recorder_for(config.torch_profiler_dir, sglang_rank_label(parallel_of(manager, module)),
                                    config.options)
            if recorder is not None and recorder.by_version:
                recorder.read_version = scheduler_reader()
    except Exception as e:  # never into the scheduler loop: step metrics are off for this scheduler
        logger.warning("rlprof: step metrics off on this scheduler: %s: %s", type(e).__name__, e)
        recorder = None
    manager.__dict__[RECORDER_ATTR] = recorder if recorder is not None else _OFF
    return recorder


def follow_version(recorder: StepRecorder) -> None:
    read = getattr(recorder, "read_version", None)
    if read is not None:
        try:
            recorder.weight_version(read())
        except Exception as e:
            recorder.read_version = None
            logger.warning("rlprof: the scheduler's weight version cannot be read (%s): steps follow starts only", e)
