"""Patch module (scheduler processes): the RL phases each scheduler runs, timed into its step metrics.

A trainer drives an SGLang server between rollouts through requests that
every scheduler (one per rank) handles on its own thread: ``flush_cache``,
``pause_generation`` and ``continue_generation`` on the scheduler, the weight
updates (``update_weights_from_disk``, ``_distributed``, ``_tensor``,
``_ipc``) and ``release_memory_occupation``/``resume_memory_occupation``
(sleep and wake-up) on its weight updater. Each wrapper runs SGLang's own
method unchanged and hands its time to the rank's step metrics
(``rlprof_plugins.metrics.phases``); a scheduler without step metrics runs
the method alone.

The weight updater became a scheduler component in 0.5.15; before, these
methods were a scheduler mixin's, and rlprof does not time them there.
"""

from __future__ import annotations

from typing import Any

from rlprof_plugins.metrics import phases

from ..base import Patch
from ..features import RL_PHASES
from .facts import BELOW
from .step_metrics import step_recorder

PHASE_VERSIONS = f">=0.5.15,<{BELOW}"  # the weight updater as a scheduler component


def _timed(scheduler: Any, phase: str, call: str, wrapped, args, kwargs, detail: str | None = None):
    recorder = step_recorder(scheduler) if scheduler is not None else None
    if recorder is None:
        return wrapped(*args, **kwargs)
    # the flight recorder is told first: a long weight update is the trainer's work, not a stalled scheduler
    return phases.timed(phase, call, lambda: wrapped(*args, **kwargs), recorder.phase, detail, starting=recorder.idle)


def _request(args, kwargs) -> Any:
    return args[0] if args else kwargs.get("recv_req")


def _tags(request: Any) -> str | None:
    tags = getattr(request, "tags", None)
    return f"tags={','.join(map(str, tags))}" if tags else None


def _flush_cache(wrapped, instance, args, kwargs):
    return _timed(instance, phases.CACHE_RESET, "flush_cache", wrapped, args, kwargs)


def _pause_generation(wrapped, instance, args, kwargs):
    mode = getattr(_request(args, kwargs), "mode", None)
    return _timed(instance, phases.PAUSE, "pause_generation", wrapped, args, kwargs,
                  f"mode={mode}" if mode is not None else None)


def _continue_generation(wrapped, instance, args, kwargs):
    return _timed(instance, phases.RESUME, "continue_generation", wrapped, args, kwargs)


def _weight_update(call: str):
    def wrapper(wrapped, instance, args, kwargs):
        return _timed(getattr(instance, "scheduler", None), phases.WEIGHT_UPDATE, call, wrapped, args, kwargs)

    wrapper.__name__ = f"_{call}"
    return wrapper


def _release_memory(wrapped, instance, args, kwargs):
    return _timed(getattr(instance, "scheduler", None), phases.SLEEP, "release_memory_occupation", wrapped, args,
                  kwargs, _tags(_request(args, kwargs)))


def _resume_memory(wrapped, instance, args, kwargs):
    return _timed(getattr(instance, "scheduler", None), phases.WAKE_UP, "resume_memory_occupation", wrapped, args,
                  kwargs, _tags(_request(args, kwargs)))


SCHEDULER_PHASES_PATCH = Patch(
    name="sglang.phases.scheduler",
    engine="sglang",
    versions=PHASE_VERSIONS,
    module="sglang.srt.managers.scheduler",
    feature=RL_PHASES,
    why="time the cache flushes, pauses and resumes a trainer asks of each scheduler, per step and rank",
    upstream="per-rank timings of these requests in SGLang's own metrics",
    wrap={"Scheduler.flush_cache": _flush_cache, "Scheduler.pause_generation": _pause_generation,
          "Scheduler.continue_generation": _continue_generation},
)

WEIGHT_UPDATER_PHASES_PATCH = Patch(
    name="sglang.phases.weight_updater",
    engine="sglang",
    versions=PHASE_VERSIONS,
    module="sglang.srt.managers.scheduler_components.weight_updater",
    feature=RL_PHASES,
    why="time the weight updates, sleeps (release_memory_occupation) and wake-ups a trainer asks of each "
        "scheduler, per step and rank",
    upstream="per-rank timings of these requests in SGLang's own metrics",
    wrap={**{f"SchedulerWeightUpdaterManager.{call}": _weight_update(call)
             for call in ("update_weights_from_disk", "update_weights_from_distributed", "update_weights_from_tensor",
                          "update_weights_from_ipc")},
          "SchedulerWeightUpdaterManager.release_memory_occupation": _release_memory,
          "SchedulerWeightUpdaterManager.resume_memory_occupation": _resume_memory},
    # the release's updater keeps its scheduler: the wrappers find the rank's step metrics there
    relies_on={"SchedulerWeightUpdaterManager.scheduler": "present"},
)

PATCHES = (SCHEDULER_PHASES_PATCH, WEIGHT_UPDATER_PHASES_PATCH)
