"""SGLang scheduler: rlprof sessions in every scheduler process.

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
  records the idle loop's busy polling (``ProfilerController.idle``).

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
from typing import Any

from rlprof_plugins import __version__ as PLUGIN_VERSION
from rlprof_plugins.store import manifest
from rlprof_plugins._log import logger
from rlprof_plugins.backends import choice
from rlprof_plugins.backends.kind import BuildContext
from rlprof_plugins.session.protocol import unavailable_reply
from rlprof_plugins.errors import OptionsError
from rlprof_plugins.config.launch_config import ProfilerConfig, from_environment
from rlprof_plugins.session.controller import ProfilerController
from rlprof_plugins.trace.naming import sglang_rank_label, sglang_worker_name

from ..base import Patch
from ..features import STEP_WINDOWS
from . import native_requests
from .facts import MANAGER_VERSIONS, MIXIN_VERSIONS, NAME, VERSIONS, version as sglang_version
from .iterations import iteration_info


CHANNEL = "rlprof:"
CONTROLLER_ATTR = "_rlprof_controller"


def encode_command(command: dict) -> str:
    return CHANNEL + json.dumps(command)


def decode_command(profile_id: Any) -> dict | None:
    if isinstance(profile_id, str) and profile_id.startswith(CHANNEL):
        return json.loads(profile_id[len(CHANNEL):])
    return None


# ---- ranks and the controller ---------------------------------------------
def parallel_of(manager: Any, module: Any) -> dict[str, int]:
    """This scheduler's place, from the same source native file names use:
    ``get_parallel()`` (newest), the manager's ``ps`` (0.5.13+) or the
    scheduler's own attributes (mixin era)."""
    getter = getattr(module, "get_parallel", None)
    p = getter() if getter is not None else getattr(manager, "ps", manager)

    def num(*names: str, default: int) -> int:
        for name in names:
            value = getattr(p, name, None)
            if value:  # None (unset) or 0 (a size some releases leave 0): the default
                return int(value)
        return default

    return {
        "tp": num("tp_rank", default=0), "tp_size": num("tp_size", default=1),
        "pp": num("pp_rank", default=0), "pp_size": num("pp_size", default=1),
        "dp": num("dp_rank", default=0), "dp_size": num("num_dp_ranks", "dp_size", default=1),
        "ep": num("moe_ep_rank", default=0), "ep_size": num("moe_ep_size", default=1),
    }


def node_of() -> tuple[int, int]:
    """``(node_rank, nnodes)`` of this scheduler's server (``--node-rank``, ``--nnodes``), from the
    server arguments the release publishes to its schedulers (``runtime_context.get_server_args``
    on the newest, ``server_args.get_global_server_args`` before); one node where neither answers."""
    import importlib

    for module, name in (("sglang.srt.runtime_context", "get_server_args"),
                         ("sglang.srt.server_args", "get_global_server_args")):
        try:
            args = getattr(importlib.import_module(module), name)()
            return int(getattr(args, "node_rank", 0) or 0), int(getattr(args, "nnodes", 1) or 1)
        except Exception:
            continue
    return 0, 1


def manifest_header(pos: dict[str, int], config: ProfilerConfig, nodes: int = 1) -> dict[str, Any]:
    """What every scheduler's section of a step's manifest says about the engine."""
    return manifest.engine_header(engine=NAME, engine_version=sglang_version(),
                                  expected_ranks=pos["tp_size"] * pos["pp_size"] * pos["dp_size"],
                                  parallel={"tp": pos["tp_size"], "pp": pos["pp_size"], "dp": pos["dp_size"]},
                                  trace_dir=config.torch_profiler_dir, plugin_version=PLUGIN_VERSION, nodes=nodes)


def forward_count(manager: Any) -> int:
    """The scheduler's forward passes so far, as SGLang's own ``start_step``
    reads them: the manager's ``get_forward_ct`` (0.5.13+) or the scheduler's
    ``forward_ct`` (mixin era, where the manager is the scheduler)."""
    get = getattr(manager, "get_forward_ct", None)
    return int(get() if callable(get) else getattr(manager, "forward_ct", 0) or 0)


def controller_for(manager: Any, module: Any) -> ProfilerController:
    ctl = manager.__dict__.get(CONTROLLER_ATTR)
    if ctl is None:
        import torch

        config = from_environment() or ProfilerConfig()
        pos = parallel_of(manager, module)
        label = sglang_rank_label(pos)
        cuda = torch.cuda.is_available()
        # On Ascend SGLang swaps torch.profiler for torch_npu's; the npu
        # backend records with torch_npu's own API and options instead.
        kind = choice.resolve(config.options.backend, choice.device_type())
        node, nodes = node_of()
        ctl = ProfilerController(
            root_dir=config.torch_profiler_dir or ".",  # every start names its directory
            worker_name=lambda prefix: sglang_worker_name(prefix, label),
            rank_name=label,  # the rank's one name, as in its file names
            backend_factory=choice.factory(kind, BuildContext(
                lambda table, overrides: config.torch_settings(cuda_available=cuda, overrides=overrides),
                config.options)),
            manifest_header=manifest_header(pos, config, nodes),
            # The idle scheduler busy-polls: recording it would grow without bound.
            record_from_request=False,
            forward_count=lambda: forward_count(manager),
            node=node,
        )
        manager.__dict__[CONTROLLER_ATTR] = ctl
    return ctl


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
        return controller_for(manager, module).handle(command)
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
            from sglang.srt.managers.io_struct import ProfileReqOutput

            return ProfileReqOutput(success=False, message="an rlprof profiling session is running; "
                                                           "POST /stop_profile first")
        return wrapped(*args, **kwargs)
    import sys

    module = sys.modules[type(instance).__module__]
    replies = gather(instance, run_command(instance, module, command))
    from sglang.srt.managers.io_struct import ProfileReqOutput

    return ProfileReqOutput(success=True, message=json.dumps(replies))


# ---- wrappers: scheduler loop ---------------------------------------------
def _controller_of(scheduler: Any) -> ProfilerController | None:
    # the manager holds it (0.5.13+); in the mixin era the scheduler itself
    manager = getattr(scheduler, "profiler_manager", None) or scheduler
    return manager.__dict__.get(CONTROLLER_ATTR)


def _run_batch(wrapped, instance, args, kwargs):
    ctl = _controller_of(instance)
    if ctl is None or not ctl.active:
        return wrapped(*args, **kwargs)
    info = iteration_info(args[0] if args else kwargs.get("batch"))
    if info is None:
        return wrapped(*args, **kwargs)
    ctl.begin_iteration(info)
    try:
        return wrapped(*args, **kwargs)
    finally:
        ctl.end_iteration()


def _on_idle(wrapped, instance, args, kwargs):
    ctl = _controller_of(instance)
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
