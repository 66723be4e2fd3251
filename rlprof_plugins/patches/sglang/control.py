"""Helper: each SGLang scheduler's ``ProfilerController``, and where the scheduler sits.

Not a patch module. The scheduler's place in the parallel groups (the same
source native file names use), its node, the manifest header every
scheduler writes, the forward-pass count SGLang's ``start_step`` reads, and
the controller built once per scheduler (held by the profiler manager, or
by the scheduler itself in the mixin era). The ``scheduler`` patch module
drives it.
"""

from __future__ import annotations

from typing import Any

from rlprof_plugins import __version__ as PLUGIN_VERSION
from rlprof_plugins.backends import which_backend
from rlprof_plugins.backends.kind import BuildContext
from rlprof_plugins.config.launch_config import ProfilerConfig, from_environment, parse_profiler_config
from rlprof_plugins.session.controller import ProfilerController
from rlprof_plugins.store import manifest, servers
from rlprof_plugins.trace.format.naming import sglang_rank_label, sglang_worker_name

from .facts import NAME, version as sglang_version


CONTROLLER_ATTR = "_rlprof_controller"


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
                                  trace_dir=config.server_root(), plugin_version=PLUGIN_VERSION, nodes=nodes,
                                  server=servers.server_name())


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

        # a server launched without rlprof's configuration records as an empty one does (sampled stacks)
        config = from_environment() or parse_profiler_config({})
        pos = parallel_of(manager, module)
        label = sglang_rank_label(pos)
        cuda = torch.cuda.is_available()
        # On Ascend SGLang swaps torch.profiler for torch_npu's; the npu
        # backend records with torch_npu's own API and options instead.
        # "profiler": "cuda" (and a request's CUDA_PROFILER) records with the cuda backend.
        kind = which_backend.resolve(config.options.backend, which_backend.device_type(), config.profiler)
        node, nodes = node_of()
        ctl = ProfilerController(
            root_dir=config.server_root() or ".",  # every start names its directory
            worker_name=lambda prefix: sglang_worker_name(prefix, label),
            rank_name=label,  # the rank's name, as in its file names
            backend_factory=which_backend.factory(kind, BuildContext(
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


# ---- wrappers: scheduler loop ---------------------------------------------
def controller_of(scheduler: Any) -> ProfilerController | None:
    # the manager holds it (0.5.13+); in the mixin era the scheduler itself
    manager = getattr(scheduler, "profiler_manager", None) or scheduler
    return manager.__dict__.get(CONTROLLER_ATTR)
