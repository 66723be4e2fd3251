"""vLLM worker: sessions with step windows and global-step folders.

Native ``Worker.profile`` builds one profiler on the first start and
``WorkerProfiler.step()`` counts windows with an off-by-one. We give each
worker an rlprof ``ProfilerController`` (fresh backend per session, exact
half-open windows, auto-export at ``step_end``) and tell it when each engine
iteration begins and ends. An iteration is one ``execute_model`` call that
runs a forward pass (it schedules at least one token; vLLM also calls it
with an empty batch, e.g. to flush finished requests, and those are not
counted) plus the ``sample_tokens`` call that completes it when sampling is
deferred. An empty call says the engine is about to wait for work: the
controller's ``idle`` ends a recording's running chunk there.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from rlprof_plugins import __version__ as PLUGIN_VERSION
from rlprof_plugins.store import manifest
from rlprof_plugins.backends import choice
from rlprof_plugins.backends.kind import BuildContext
from rlprof_plugins.backends.torch_profiler import TorchSettings, settings_from_config
from rlprof_plugins.session.protocol import unavailable_reply
from rlprof_plugins._log import warn_once
from rlprof_plugins.errors import OptionsError
from rlprof_plugins.config.requests import parse_start
from rlprof_plugins.session.controller import ProfilerController
from rlprof_plugins.trace.naming import rank_label, vllm_worker_name

from ..base import Patch
from ..features import STEP_WINDOWS
from .facts import NAME, PLATFORM_ACTIVITIES, VERSIONS, version as vllm_version
from .iterations import iteration_info
from .profiler_config import PROFILER_CONFIG_FIELDS, options_of, plugin_handles, profiler_config_of, request_server

CONTROLLER_ATTR = "_rlprof_controller"
PENDING_ATTR = "_rlprof_iteration_open"
FORWARDS_ATTR = "_rlprof_forwards"  # forward passes run by this worker (SGLang's start_step counts them)


def manifest_header(vllm_config: Any, trace_dir: str | None) -> dict[str, Any]:
    """What every writer of a step's manifest (each rank, the API server) says about the engine."""
    p = vllm_config.parallel_config
    return manifest.engine_header(engine=NAME, engine_version=vllm_version(), expected_ranks=p.world_size,
                                  parallel={"tp": p.tensor_parallel_size, "pp": p.pipeline_parallel_size,
                                            "dp": p.data_parallel_size},
                                  trace_dir=trace_dir, plugin_version=PLUGIN_VERSION, nodes=getattr(p, "nnodes", 1))


def node_of(vllm_config: Any) -> int:
    """The node this process runs on (``--node-rank``; vLLM 0.11+ runs a server across nodes)."""
    return int(getattr(vllm_config.parallel_config, "node_rank", 0) or 0)


def torch_settings(cfg: Any) -> TorchSettings:
    """torch.profiler settings from vLLM's profiler config (shared with the front end);
    without ``torch_profiler_activities``, the platform's devices."""
    from vllm.platforms import current_platform

    version = vllm_version()
    return settings_from_config(
        cfg, default_activities=PLATFORM_ACTIVITIES.get(current_platform.device_type, ("CPU",)),
        extra_metadata={"vllm_version": json.dumps(version)} if version else {},
    )


def worker_profiler_config(worker: Any) -> Any:
    """``Worker.profiler_config`` (0.17+), the engine's config (0.13-0.16) or
    the env-era config (< 0.13)."""
    cfg = getattr(worker, "profiler_config", None)
    return cfg if cfg is not None else profiler_config_of(getattr(worker, "vllm_config", None))


def rank_suffix(worker: Any) -> str:
    """vLLM's own worker trace name (0.17+: ``dp0_pp0_tp1_dcp0_ep0_rank1``);
    ``rank<r>`` on releases without it."""
    try:
        from vllm.distributed.utils import get_worker_rank_suffix
    except ImportError:
        return rank_label(worker.rank)
    return get_worker_rank_suffix(global_rank=worker.rank)


def backend_factory(cfg: Any, options: Any) -> Any:
    """The session backend of this worker: torch.profiler, or torch_npu on
    Ascend (vllm-ascend's platform says ``npu``) or when asked for."""
    from vllm.platforms import current_platform

    settings = torch_settings(cfg)
    kind = choice.resolve(options.backend, current_platform.device_type)
    return choice.factory(kind, BuildContext(
        lambda table, overrides: with_overrides(settings, overrides, write_table=table), options,
        settings.extra_metadata))


def with_overrides(settings: TorchSettings, overrides: dict | None, **more: Any) -> TorchSettings:
    """One session's torch settings: the configured ones, the request's own
    (``profiler_kwargs``, SGLang-style ``activities``/``with_stack``) over them."""
    changes = dict(overrides or {})
    if "activities" in changes:
        changes["activities"] = tuple(changes["activities"])
    return dataclasses.replace(settings, **changes, **more)


def controller_for(worker: Any) -> ProfilerController:
    ctl = worker.__dict__.get(CONTROLLER_ATTR)
    if ctl is None:
        cfg = worker_profiler_config(worker)
        suffix = rank_suffix(worker)
        factory = backend_factory(cfg, options_of(cfg))
        ctl = ProfilerController(
            root_dir=cfg.torch_profiler_dir,
            worker_name=lambda prefix: vllm_worker_name(prefix, suffix),
            rank_name=rank_label(worker.rank),  # the rank's one name; its files keep vLLM's suffix
            backend_factory=factory,
            manifest_header=manifest_header(worker.vllm_config, cfg.torch_profiler_dir),
            forward_count=lambda: worker.__dict__.get(FORWARDS_ATTR, 0),
            node=node_of(worker.vllm_config),
        )
        worker.__dict__[CONTROLLER_ATTR] = ctl
    return ctl


def worker_control(obj: Any, command: dict) -> dict:
    """Run one rlprof command on a worker; sent through ``collective_rpc``.

    ``obj`` is vLLM's ``WorkerWrapperBase`` (or the worker itself).
    """
    worker = getattr(obj, "worker", obj)
    if not hooked(worker):
        return unavailable_reply(f"the worker hooks are not installed in this process ({type(worker).__name__})")
    if not plugin_handles(worker_profiler_config(worker)):
        return unavailable_reply("the profiler config is not handled by rlprof")
    try:
        ctl = controller_for(worker)
    except OptionsError as e:  # e.g. backend "torch" on an Ascend worker
        return {"ok": False, "invalid": {"field": e.key, "message": e.message}}
    return ctl.handle(command)


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
        return output
    state = instance.__dict__
    state[FORWARDS_ATTR] = state.get(FORWARDS_ATTR, 0) + 1
    ctl = state.get(CONTROLLER_ATTR)
    if ctl is None or not ctl.active:
        return wrapped(*args, **kwargs)
    if instance.__dict__.pop(PENDING_ATTR, False):
        ctl.end_iteration()  # the previous iteration never reached sample_tokens
    ctl.begin_iteration(iteration_info(scheduler_output))
    try:
        output = wrapped(*args, **kwargs)
    except BaseException:
        ctl.end_iteration()
        raise
    if output is None:
        instance.__dict__[PENDING_ATTR] = True  # sampling is deferred to sample_tokens
    else:
        ctl.end_iteration()
    return output


def _sample_tokens(wrapped, instance, args, kwargs):
    if not instance.__dict__.pop(PENDING_ATTR, False):
        return wrapped(*args, **kwargs)
    try:
        return wrapped(*args, **kwargs)
    finally:
        ctl = instance.__dict__.get(CONTROLLER_ATTR)
        if ctl is not None:
            ctl.end_iteration()


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


WORKER_PATCH = worker_patch(
    name="vllm.worker.profile",
    engine="vllm",
    versions=VERSIONS,
    module="vllm.v1.worker.gpu_worker",
    cls="Worker",
    feature=STEP_WINDOWS,
    why=(
        "native Worker.profile builds its profiler once and counts windows off by one; "
        "count iterations at execute_model/sample_tokens and run rlprof sessions"
    ),
    upstream="a per-session profiler factory and an iteration hook in Worker",
    relies_on={
        "vllm.distributed.utils:get_worker_rank_suffix": "signature",
        "vllm.v1.utils:compute_iteration_details": "signature",
        "vllm.v1.core.sched.output:SchedulerOutput":
            "fields:scheduled_new_reqs,num_scheduled_tokens,total_num_scheduled_tokens",
        "vllm.platforms:current_platform": "present",
        "vllm.config:ProfilerConfig": PROFILER_CONFIG_FIELDS,
    },
)

PATCHES = (WORKER_PATCH,)
