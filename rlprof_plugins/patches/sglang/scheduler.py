"""Patch module (scheduler processes): rlprof sessions in every scheduler process.

Native SGLang counts ``start_step`` from server start (never reset), exports
on the scheduler thread (the engine freezes for the export), classifies
speculative verify batches as prefill and has no completion signal. Each
scheduler gets an rlprof ``ProfilerController`` instead, driven like vLLM's
workers:

- commands arrive as SGLang's own ``ProfileReq`` whose ``profile_id`` holds
  ``rlprof:<json>`` (the one free-form field every release carries, so no
  new message type has to cross SGLang's typed IPC); every rank of the
  replica runs the command and the replies are gathered on the TP group, so
  the front end hears from every rank;
- one iteration is one ``Scheduler.run_batch`` of a batch that runs the
  model (IDLE and PREBUILT placeholders are not iterations);
- a stop is answered first; the profiler stops at the next batch or from
  ``Scheduler.on_idle``, on the scheduler thread that recorded;
- from the idle hook a chunked recording's running chunk ends, so no profiler
  records the idle loop's busy polling (``ProfilerController.idle``);
- every batch that runs the model is timed into the scheduler's step metrics
  (``step_metrics.STEP_METRICS``, the hook of the same shape vLLM's ``worker_hooks`` makes),
  recorded or not; the RL step follows the scheduler's own copy of the weight
  version (``weight_reader.scheduler_reader``: read each batch, parsed only
  when it changed) and every start that names a ``global_step``.

Requests without the ``rlprof:`` marker reach SGLang's native profiler
unchanged (refused only while an rlprof session records: one profiler at a
time).

Release eras: the profiler lives in ``SchedulerProfilerMixin`` (methods of
the scheduler itself, 0.5.5-0.5.12) or in ``SchedulerProfilerManager``
(0.5.13+); the rank comes from the scheduler's attributes, the manager's
``ps`` (0.5.13-0.5.2x) or ``runtime_context.get_parallel()`` (newest). The
idle hook is ``on_idle`` (0.5.12+) or ``self_check_during_idle``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from rlprof_plugins._log import logger
from rlprof_plugins.errors import OptionsError
from rlprof_plugins.session.protocol import unavailable_reply

from ..base import Patch
from ..features import STEP_WINDOWS
from . import native_requests
from .control import CONTROLLER_ATTR, controller_for, controller_of
from .facts import MANAGER_VERSIONS, MIXIN_VERSIONS, VERSIONS
from .iterations import iteration_info
from .step_metrics import STEP_METRICS, step_recorder
from .wire import decode_command


def gather(manager: Any, reply: dict) -> list[dict]:
    """Every rank's reply, on every rank (the TP group runs each request together)."""
    import torch.distributed as dist

    group = getattr(manager, "dp_tp_cpu_group", None)
    if group is None or not dist.is_initialized() or dist.get_world_size(group) == 1:
        return [reply]
    out: list[Any] = [None] * dist.get_world_size(group)
    try:
        dist.all_gather_object(out, reply, group=group)
    except Exception as e:  # never into the scheduler loop; the answer says what is missing
        logger.warning("rlprof: gathering the ranks' replies failed: %s: %s", type(e).__name__, e)
        return [reply, {"ok": False, "error": f"other ranks did not answer: {type(e).__name__}: {e}"}]
    return out


def run_command(manager: Any, module: Any, command: dict) -> dict:
    """One rank's answer to one command; never raises."""
    try:
        if not SCHEDULER_PATCH.applied:
            return unavailable_reply("the scheduler iteration hooks are not installed in this process")
        ctl = manager.__dict__.get(CONTROLLER_ATTR)
        native_busy = bool(getattr(manager, "profile_in_progress", False))
        if command.get("op") == "start" and native_busy:
            return {"ok": False, "conflict": "SGLang's native profiler is running; stop it first"}
        if command.get("op") == "stop" and native_busy and (ctl is None or not ctl.active):
            return _native_stop(manager)
        answer = STEP_METRICS.command(manager, command, module)  # a trainer's step, not a session
        if answer is not None:
            return answer
        reply = controller_for(manager, module).handle(command)
        STEP_METRICS.started(manager, command, reply, module)
        return reply
    except OptionsError as e:  # e.g. backend "torch" on an Ascend scheduler
        return {"ok": False, "invalid": {"field": e.key, "message": e.message}}
    except Exception as e:  # never raise into the scheduler loop
        logger.exception("rlprof: scheduler command failed")
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}


def _native_stop(manager: Any) -> dict:
    """A stop while only SGLang's own profiler runs: stop that one, natively
    (``_stop_profile`` on the manager, ``stop_profile`` on the mixin)."""
    stop = getattr(manager, "_stop_profile", None) or manager.stop_profile
    out = stop()
    return {"ok": bool(getattr(out, "success", True)), "native": getattr(out, "message", ""), "session": None}


# ---- wrappers: profiler manager -------------------------------------------
def _wrap_profile(wrapped, instance, args, kwargs):
    """The scheduler's profile request: rlprof's commands, native requests a configured scheduler runs as
    sessions, the rest SGLang's own. Whatever it calls that raises fails this request with the reason, never
    the scheduler's event loop (SGLang's own ``_init_profile`` raising would end the scheduler)."""
    from sglang.srt.managers.io_struct import ProfileReqOutput

    try:
        return _profile(wrapped, instance, args, kwargs)
    except Exception as e:
        logger.warning("rlprof: a profile request failed on the scheduler (it keeps serving): %s: %s",
                       type(e).__name__, e)
        return ProfileReqOutput(success=False, message=f"the profile request failed: {type(e).__name__}: {e}")


def _profile(wrapped, instance, args, kwargs):
    from sglang.srt.managers.io_struct import ProfileReqOutput

    req = args[0] if args else kwargs.get("recv_req")
    try:
        command = decode_command(getattr(req, "profile_id", None))
    except ValueError:
        command = None
    if command is None:  # not from rlprof's route: a configured scheduler still runs it as a session
        handled = native_requests.answer(instance, req, run_command, gather)
        if handled is not None:
            return handled
        ctl = instance.__dict__.get(CONTROLLER_ATTR)
        if ctl is not None and ctl.active and native_requests.is_start(req):
            return ProfileReqOutput(success=False, message="an rlprof profiling session is running; "
                                                           "POST /stop_profile first")
        return wrapped(*args, **kwargs)
    module = sys.modules[type(instance).__module__]
    replies = gather(instance, run_command(instance, module, command))
    return ProfileReqOutput(success=True, message=json.dumps(replies))


def _run_batch(wrapped, instance, args, kwargs):
    ctl = controller_of(instance)
    active = ctl is not None and ctl.active
    recorder = step_recorder(instance)
    if not active and recorder is None:
        return wrapped(*args, **kwargs)
    try:
        info = iteration_info(args[0] if args else kwargs.get("batch"))
    except Exception:  # a batch of a shape this release's rule cannot read: not counted, still run
        info = None
    if info is None:
        return wrapped(*args, **kwargs)
    if recorder is not None:
        waiting = getattr(instance, "waiting_queue", None)
        # a session's iterations, and those while its files are written, carry the profiler's cost
        recorder.begin(len(waiting) if isinstance(waiting, list) else -1, ctl is not None and ctl.costs_the_engine)
    if active:
        if recorder is not None and ctl.pause_listener is None and recorder.flight is not None:
            ctl.pause_listener = recorder.flight.pause  # the session's pauses into the flight recorder's ring
        ctl.begin_iteration(info)
    try:
        return wrapped(*args, **kwargs)
    finally:
        if active:
            ctl.end_iteration()
        if recorder is not None:
            recorder.end(info)


def _on_idle(wrapped, instance, args, kwargs):
    recorder = step_recorder(instance)
    if recorder is not None:  # a version set while no batch runs still ends the step
        recorder.follow_version()
        recorder.idle()  # the flight recorder: the gap until the next batch is no stall
    ctl = controller_of(instance)
    if ctl is not None and ctl.active:
        # A stop answered earlier completes here, on this thread; a recording's running chunk
        # ends here rather than record the idle loop's busy polling.
        ctl.idle()
    return wrapped(*args, **kwargs)


PROFILER_MANAGER_PATCH = Patch(
    name="sglang.scheduler.profiler_manager",
    engine="sglang",
    versions=MANAGER_VERSIONS,
    module="sglang.srt.managers.scheduler_components.profiler_manager",
    feature=STEP_WINDOWS,
    why=("native start_step counts from server start, export freezes the scheduler, no completion signal; "
         "route rlprof commands (ProfileReq with an rlprof: profile_id) to a ProfilerController"),
    upstream="a per-request window counted from the request, non-blocking export and a status request",
    wrap={"SchedulerProfilerManager._profile": _wrap_profile},
    area="sglang.scheduler.profile_requests",
    relies_on={
        "sglang.srt.managers.io_struct:ProfileReq": "fields:profile_id,activities",
        "sglang.srt.managers.io_struct:ProfileReqOutput": "fields:success,message",
    },
)

PROFILER_MIXIN_PATCH = Patch(
    name="sglang.scheduler.profiler_mixin",
    engine="sglang",
    versions=MIXIN_VERSIONS,
    module="sglang.srt.managers.scheduler_profiler_mixin",
    feature=STEP_WINDOWS,
    why="the same as sglang.scheduler.profiler_manager, for releases whose profiler is a scheduler mixin",
    upstream="the same",
    wrap={"SchedulerProfilerMixin.profile": _wrap_profile},
    area="sglang.scheduler.profile_requests",
)

SCHEDULER_PATCH = Patch(
    name="sglang.scheduler.iterations",
    engine="sglang",
    versions=VERSIONS,
    module="sglang.srt.managers.scheduler",
    feature=STEP_WINDOWS,
    why=("count model iterations (run_batch) with rlprof's stage rule; when idle, finish a stop that was "
         "answered and end a recording's running chunk"),
    upstream="an iteration hook in the scheduler loop",
    wrap={"Scheduler.run_batch": _run_batch, "Scheduler.on_idle": _on_idle,
          "Scheduler.self_check_during_idle": _on_idle},
    # one idle hook per release: on_idle (0.5.12+), self_check_during_idle before
    optional=("Scheduler.on_idle", "Scheduler.self_check_during_idle"),
    relies_on={"sglang.srt.managers.schedule_batch:ScheduleBatch":
               "fields:forward_mode,reqs,extend_num_tokens,decoding_reqs"},
)

PATCHES = (PROFILER_MANAGER_PATCH, PROFILER_MIXIN_PATCH, SCHEDULER_PATCH)
