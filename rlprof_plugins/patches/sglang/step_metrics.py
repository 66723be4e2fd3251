"""Helper: where a scheduler's step metrics go, and the recorder the scheduler patches time into.

One ``StepMetricsHook`` per scheduler process (``STEP_METRICS``): the
iteration hooks (``scheduler.py``) and the RL phase hooks (``phases.py``)
reach the same recorder through ``step_recorder``.
"""

from __future__ import annotations

import sys
from typing import Any

from rlprof_plugins.config.launch_config import from_environment, options_from_environment
from rlprof_plugins.store.servers import server_root
from rlprof_plugins.metrics.engine_hook import RecorderPlace, StepMetricsHook
from rlprof_plugins.trace.format.naming import sglang_rank_label

from .control import parallel_of
from .weight_reader import scheduler_reader


def _step_metrics_place(manager: Any, source: Any, measure_dir: str | None = None) -> RecorderPlace | None:
    """Where a scheduler's step metrics go: the server's root (``torch_profiler_dir``), else the trainer's
    folder for this server (``measure_dir``: verl names one per replica and launches SGLang without a
    directory), under its rank's label (``source``: the module that says the rank, or an object of that
    module), and the scheduler's own copy of the weight version."""
    config = from_environment()
    root = config.server_root() if config is not None else None
    if root is None and measure_dir is not None:
        root = str(server_root(measure_dir))
    if root is None:
        return None
    module = source if isinstance(source, type(sys)) else sys.modules[type(source).__module__]
    return RecorderPlace(root, sglang_rank_label(parallel_of(manager, module)), options_from_environment(),
                         scheduler_reader())


STEP_METRICS = StepMetricsHook("sglang", _step_metrics_place)


def step_recorder(scheduler: Any) -> Any:
    """The scheduler's recorder, kept on its profiler manager (the scheduler itself in the mixin era)."""
    return STEP_METRICS.recorder(getattr(scheduler, "profiler_manager", None) or scheduler, scheduler)
