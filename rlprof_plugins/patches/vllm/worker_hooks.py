"""Helper: the hooks on a vLLM worker class, and the ``Patch`` they make.

Not a patch module: ``worker`` declares the patch on vLLM's ``Worker`` and
``vllm_ascend/worker`` the one on vllm-ascend's ``NPUWorker``, both from
``worker_patch`` here, so the two workers count iterations the same way.
An iteration is one ``execute_model`` call that runs a forward pass (it
schedules at least one token; vLLM also calls it with an empty batch, e.g.
to flush finished requests, and those are not counted) plus the
``sample_tokens`` call that completes it when sampling is deferred. An
empty call says the engine is about to wait for work: the controller's
``idle`` ends a recording's running chunk there. Every iteration is also
timed into the worker's step metrics (``STEP_METRICS``, the hook of the same
shape SGLang's ``scheduler`` patch module makes), recorded or not.

``worker_control`` is the function ``collective_rpc`` runs on each worker
for every rlprof command (pickled by reference, so it lives in a module every
worker process imports): step commands go to the step metrics, the rest to
the worker's ``ProfilerController``.
"""

from __future__ import annotations

from typing import Any

from rlprof_plugins._log import warn_once
from rlprof_plugins.config.launch_config import options_from_environment
from rlprof_plugins.config.requests import parse_start
from rlprof_plugins.errors import OptionsError
from rlprof_plugins.metrics.engine_hook import STEP_OPS, RecorderPlace, StepMetricsHook
from rlprof_plugins.session.protocol import unavailable_reply
from rlprof_plugins.store import servers

from ..base import Patch
from .config import options_of, plugin_handles, request_server, root_of
from .control import CONTROLLER_ATTR, FORWARDS_ATTR, PENDING_ATTR, controller_for, rank_name, worker_profiler_config
from .iterations import iteration_info, quick_info

INFO_ATTR = "_rlprof_iteration_info"  # the open iteration's stage and tokens, for the step metrics
ITERATING_ATTR = "_rlprof_iterating"  # the controller whose session counts the open iteration, or None


# ---- step metrics --------------------------------------------------------
def _step_metrics_place(worker: Any, measure_dir: str | None = None) -> RecorderPlace | None:
    """Where a worker's step metrics go: its profiler config's root, under its rank's name; where the
    engine has no profiler directory, the trainer's folder for this server (``measure_dir``: a verl replica
    verl does not profile), with the options of ``RLPROF_PROFILER_CONFIG``. The weight version lives in
    the EngineCore process, not here: the ``engine_core`` patch forwards each ``set_weight_version`` to
    every worker as a ``weight_version`` command."""
    config = worker_profiler_config(worker)
    if config is not None and plugin_handles(config):
        return RecorderPlace(root_of(config), rank_name(worker), options_of(config))
    if measure_dir is None:
        return None
    return RecorderPlace(str(servers.server_root(measure_dir)), rank_name(worker), options_from_environment())


STEP_METRICS = StepMetricsHook("vllm", _step_metrics_place)
RECORDER_ATTR = STEP_METRICS.attr


def worker_control(obj: Any, command: dict) -> dict:
    """Run one rlprof command on a worker; sent through ``collective_rpc``.

    ``obj`` is vLLM's ``WorkerWrapperBase`` (or the worker itself).
    """
    worker = getattr(obj, "worker", obj)
    if not hooked(worker):
        return unavailable_reply(f"the worker hooks are not installed in this process ({type(worker).__name__})")
    config = worker_profiler_config(worker)
    if not plugin_handles(config):
        # the step metrics alone, where a trainer gave this engine its folder (``measure_dir``) or did before
        measured = command.get("measure_dir") or worker.__dict__.get(RECORDER_ATTR)
        if command.get("op") not in STEP_OPS or not measured:
            return unavailable_reply("the profiler config is not handled by rlprof")
    answer = STEP_METRICS.command(worker, command)
    if answer is not None:
        return answer
    try:
        ctl = controller_for(worker)
    except OptionsError as e:  # e.g. backend "torch" on an Ascend worker
        return {"ok": False, "invalid": {"field": e.key, "message": e.message}}
    reply = ctl.handle(command)
    STEP_METRICS.started(worker, command, reply)
    return reply


def hooked(worker: Any) -> bool:
    """Whether a worker patch (vLLM's ``Worker`` or vllm-ascend's
    ``NPUWorker``) wraps this worker's class."""
    for klass in type(worker).__mro__:
        if "execute_model" in vars(klass):
            return bool(getattr(vars(klass)["execute_model"], "_self_rlprof_patch", None))
    return False


# ---- wrappers ----------------------------------------------------------
def _scheduler_output(args, kwargs) -> Any:
    return args[0] if args else kwargs.get("scheduler_output")


def _execute_model(wrapped, instance, args, kwargs):
    scheduler_output = _scheduler_output(args, kwargs)
    if getattr(scheduler_output, "total_num_scheduled_tokens", 1) <= 0:
        output = wrapped(*args, **kwargs)
        # An empty step: the engine had nothing to run (it sends one to clear the requests that
        # finished) and is about to wait for work. A recording's chunk ends here, before the
        # worker's wait loop (a second of sched_yield spins after each message) is recorded.
        ctl = instance.__dict__.get(CONTROLLER_ATTR)
        if ctl is not None and ctl.active:
            ctl.idle()
        recorder = instance.__dict__.get(RECORDER_ATTR)
        if recorder:  # the flight recorder: the gap until the next iteration is no stall
            recorder.idle()
        return output
    state = instance.__dict__
    state[FORWARDS_ATTR] = state.get(FORWARDS_ATTR, 0) + 1
    ctl = state.get(CONTROLLER_ATTR)
    active = ctl is not None and ctl.active
    recorder = state.get(RECORDER_ATTR)
    if recorder is None:  # built on the first model execution (False: step metrics are off)
        recorder = STEP_METRICS.recorder(instance)
    if not active and not recorder:
        return wrapped(*args, **kwargs)
    if state.pop(PENDING_ATTR, False):
        _end(state, state.get(ITERATING_ATTR))  # the previous iteration never reached sample_tokens
    info = iteration_info(scheduler_output) if active else quick_info(scheduler_output)
    if recorder:
        state[INFO_ATTR] = info
        # a worker does not see the scheduler's waiting requests; a session's iterations, and those while its
        # files are written, carry the profiler's cost
        recorder.begin(-1, ctl is not None and ctl.costs_the_engine)
    if active:
        if recorder and ctl.pause_listener is None and recorder.flight is not None:
            ctl.pause_listener = recorder.flight.pause  # the session's pauses into the flight recorder's ring
        ctl.begin_iteration(info)
    else:
        ctl = None
    state[ITERATING_ATTR] = ctl
    try:
        output = wrapped(*args, **kwargs)
    except BaseException:
        _end(state, ctl)
        raise
    if output is None:
        state[PENDING_ATTR] = True  # sampling is deferred to sample_tokens
    else:
        _end(state, ctl)
    return output


def _end(state: dict, ctl: Any) -> None:
    """One iteration over: the session's (when it recorded its start) and the step metrics'."""
    if ctl is not None:
        ctl.end_iteration()
    recorder = state.get(RECORDER_ATTR)
    if recorder:
        recorder.end(state.pop(INFO_ATTR, None))


def _sample_tokens(wrapped, instance, args, kwargs):
    state = instance.__dict__
    if not state.pop(PENDING_ATTR, False):
        return wrapped(*args, **kwargs)
    try:
        return wrapped(*args, **kwargs)
    finally:
        _end(state, state.get(ITERATING_ATTR))


def _profile(wrapped, instance, args, kwargs):
    """Route vLLM's own profile RPC to the controller, so every caller of the
    native chain (e.g. ``EngineCore.profile``) gets the same sessions."""
    cfg = worker_profiler_config(instance)
    if not plugin_handles(cfg):
        return wrapped(*args, **kwargs)

    def bind(is_start=True, profile_prefix=None, *, delay_iterations=None, max_iterations=None, profiler_kwargs=None):
        return is_start, profile_prefix, delay_iterations, max_iterations, profiler_kwargs

    is_start, prefix, delay, limit, profiler_kwargs = bind(*args, **kwargs)
    try:
        ctl = controller_for(instance)
    except OptionsError as e:
        warn_once(f"profile:{e.key}", "rlprof: profiling not started: %s", e)
        return None
    if not is_start:
        ctl.handle({"op": "stop"})
        return None
    fields = {"profile_prefix": prefix, "delay_iterations": delay, "max_iterations": limit,
              "profiler_kwargs": profiler_kwargs}
    ctl.handle(parse_start(fields, request_server(cfg)).to_command())
    return None


def _shutdown(wrapped, instance, args, kwargs):
    ctl = instance.__dict__.get(CONTROLLER_ATTR)
    if ctl is not None:
        try:
            ctl.shutdown()
        except Exception:  # shutting down must go on regardless
            pass
    return wrapped(*args, **kwargs)


def worker_patch(*, name: str, engine: str, versions: str, module: str, cls: str, feature: str, why: str,
                 upstream: str, relies_on: dict[str, str] | None = None) -> Patch:
    """The worker hooks on a worker class: vLLM's ``Worker`` here, and any
    class with the same ``execute_model``, ``sample_tokens`` (optional: vLLM
    < 0.12 samples inside ``execute_model``), ``profile(is_start,
    profile_prefix)`` and ``shutdown`` (vllm-ascend's ``NPUWorker``)."""
    return Patch(
        name=name,
        engine=engine,
        versions=versions,
        module=module,
        feature=feature,
        why=why,
        upstream=upstream,
        wrap={
            f"{cls}.execute_model": _execute_model,
            f"{cls}.sample_tokens": _sample_tokens,
            f"{cls}.profile": _profile,
            f"{cls}.shutdown": _shutdown,
        },
        optional=(f"{cls}.sample_tokens",),
        relies_on=dict(relies_on or {}),
    )
