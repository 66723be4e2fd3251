"""Patch module (verl's server actors): verl's rollout server actors: their ``start_profile`` and ``set_global_steps`` carry the RL step to the engine.

verl's trainer starts rollout profiling with no arguments: ``RolloutReplica.
start_profile(**kwargs)`` calls ``server.start_profile.remote(**kwargs)`` on
each server actor. ``vLLMHttpServer.start_profile`` awaits
``AsyncLLM.start_profile(**kwargs)``; ``SGLangHttpServer.start_profile``
builds its own ``tokenizer_manager.start_profile(...)`` arguments and drops
the incoming ones. Neither passes a step, but each actor holds the weights
version of its last sync (``set_global_steps``).

The wrapper sets ``rlprof_plugins.step_sources.trainer.CURRENT`` (the caller's
``global_step`` kwarg, else that weights version) around verl's own method;
the start request that method makes, through rlprof's ``AsyncLLM`` or
``TokenizerManager`` patch, takes its global step from there
(``requests.parse_start``, offset ``trainer_step_offset``). Nothing is added
to the engine call itself: where the engine runs without rlprof, the call is
exactly verl's (no ``TypeError`` from a keyword stock vLLM does not take).

verl calls ``set_global_steps(global_steps)`` on every server actor after
each weight sync, profiling or not. The wrapper runs verl's method, then
tells the engine the step its iterations now count for (``global_steps`` +
``trainer_step_offset``, the step a start would record into) with a
``mark_step`` command on every rank, so the step metrics measure every
rollout with no call from the trainer. The actor's engine is reached the
way verl's own methods reach it (``engine`` on vLLM, ``tokenizer_manager``
on SGLang); an actor without one (a node other than the server's first)
sends nothing, and a failure is one warning: verl's call returns as it
would without rlprof. verl hands the engine a profiler directory only on
the replicas it traces (vLLM) or on none (SGLang, whose folder comes with
each start), so the command also names the replica's folder verl would
give it (``replica_folder``), where the step metrics, the flight recorder
and the requests that held each step go when the engine has no directory
of its own: every replica is measured with verl's defaults, and only the
traced ones are traced.

Patched where the actor runs: the module's import in each actor process (an
actor class is unpickled by reference) applies the patch. Plain ``async
def`` wrappers: Ray reads each method's coroutine flag and signature when
the class becomes an actor. verl's trainer-side ``LLMServerManager`` is left
alone: its ``auto_await`` inspects the caller's frame, which a wrapper
there would change.
"""

from __future__ import annotations

import os
from typing import Any

from rlprof_plugins.step_sources import trainer as trainer_step
from rlprof_plugins._log import warn_once
from rlprof_plugins.step_sources.trainer import TrainerStep

from ..base import Patch
from ..features import TRAINER_STEPS
from .facts import (ENGINE_ATTRS, NAME, PROFILER_ATTR, REPLICA_FOLDER, REPLICA_RANK_ATTR, SERVER_MODULES, VERSIONS,
                    WEIGHTS_VERSION_ATTR)


def _count(value: Any) -> int | None:
    """A step or version verl holds, if it is one (an int >= 0, not a bool)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def step_of(server: Any, kwargs: dict) -> TrainerStep:
    """What this actor knows of the step: the caller's ``global_step``, its weights version."""
    try:
        # the caller's value as given: the start request checks it, naming the field
        return TrainerStep(NAME, global_step=kwargs.get("global_step"),
                           weights_version=_count(getattr(server, WEIGHTS_VERSION_ATTR, None)))
    except Exception as e:  # never in the way of verl's own call
        warn_once("verl-step", "rlprof: verl's step could not be read (%s: %s); no global step", type(e).__name__, e)
        return TrainerStep(NAME)


async def _start(wrapped, instance, args, kwargs):
    with trainer_step.given(step_of(instance, kwargs)):
        return await wrapped(*args, **kwargs)


async def _set_global_steps(wrapped, instance, args, kwargs):
    result = await wrapped(*args, **kwargs)
    try:
        await _mark_engine_step(instance)
    except Exception as e:  # never in the way of verl's own call
        warn_once("verl-set-steps", "rlprof: verl's step could not reach the engine's step metrics (%s: %s); "
                  "they follow profiling starts only", type(e).__name__, e)
    return result


def replica_folder(server: Any) -> str | None:
    """The folder verl gives this replica's engine for its profiles (``<save_path>/agent_loop_rollout_replica_
    <r>``, verl's ``rollout_trace_dir``), where verl's rollout profiler is on; None where it is off. verl
    configures the engine's profiler only on the replicas it traces (and SGLang's on none), so the others'
    step metrics are placed there by the weight sync's ``mark_step``."""
    controller = getattr(server, PROFILER_ATTR, None)
    config = getattr(controller, "config", None)
    save_path = getattr(config, "save_path", None)
    rank = _count(getattr(server, REPLICA_RANK_ATTR, None))
    if controller is None or not controller.check_enable() or not save_path or rank is None:
        return None
    return os.path.join(str(save_path), REPLICA_FOLDER.format(rank=rank))


async def _mark_engine_step(server: Any) -> None:
    """The step the actor's weights serve, marked on every rank of its engine (see the docstring)."""
    version = _count(getattr(server, WEIGHTS_VERSION_ATTR, None))
    if version is None:
        return
    folder = replica_folder(server)
    engine = getattr(server, ENGINE_ATTRS["vllm"], None)
    if engine is not None and hasattr(engine, "engine_core"):
        from ..vllm import sessions as vllm_sessions

        await vllm_sessions.mark_step(engine, version, trainer=NAME, measure_dir=folder)
        return
    manager = getattr(server, ENGINE_ATTRS["sglang"], None)
    if manager is not None:
        from ..sglang import sessions as sglang_sessions

        await sglang_sessions.mark_step(manager, version, trainer=NAME, measure_dir=folder)


def _server_patch(engine: str, cls: str) -> Patch:
    return Patch(
        name=f"verl.servers.{engine}",
        engine=NAME,
        versions=VERSIONS,
        module=SERVER_MODULES[engine],
        feature=TRAINER_STEPS,
        why=(f"verl's trainer starts profiling with no step, and tells the engine none at a weight sync; "
             f"{cls} knows the weights version it holds (set_global_steps)"),
        upstream="verl passing its global step to the engine's start (verl #5025, reverted in verl #5121)",
        wrap={f"{cls}.start_profile": _start, f"{cls}.set_global_steps": _set_global_steps},
        plain_async=True,
    )


VLLM_SERVER_PATCH = _server_patch("vllm", "vLLMHttpServer")
SGLANG_SERVER_PATCH = _server_patch("sglang", "SGLangHttpServer")

PATCHES = (VLLM_SERVER_PATCH, SGLANG_SERVER_PATCH)
