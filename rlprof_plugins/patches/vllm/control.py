"""Helper: vLLM's control path, from the API server to every worker.

Not a patch module (it declares no ``Patch``): the EngineCore utility's name
(``UTILITY``), each worker's ``ProfilerController`` and the settings it
records with, and the engine's idle state a start carries. The function
``collective_rpc`` runs on each worker (``worker_control``) is the worker
hooks' (``worker_hooks``), beside the worker's step metrics. The patch
modules of every process (``worker``, ``engine_core``, ``engine_profile``,
``async_llm``) import it; none imports another.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from rlprof_plugins import __version__ as PLUGIN_VERSION
from rlprof_plugins.backends import which_backend
from rlprof_plugins.backends.kind import BuildContext
from rlprof_plugins.backends.torch_profiler import TorchSettings, settings_from_config
from rlprof_plugins.errors import OptionsError
from rlprof_plugins.session.controller import ProfilerController
from rlprof_plugins.store import manifest, servers
from rlprof_plugins.trace.format.naming import rank_label, vllm_rank_suffix, vllm_worker_name

from .config import options_of, plugin_handles, profiler_config_of, root_of
from .facts import NAME, PLATFORM_ACTIVITIES, version as vllm_version

UTILITY = "rlprof_control"  # the EngineCore utility the engine_core patch adds


CONTROLLER_ATTR = "_rlprof_controller"


PENDING_ATTR = "_rlprof_iteration_open"


FORWARDS_ATTR = "_rlprof_forwards"  # forward passes run by this worker (SGLang's start_step counts them)


def engines_of(parallel_config: Any) -> int:
    """How many engines of this server write its step folders: its data-parallel size, where one API server
    runs them all (vLLM's own balancing), else one (an engine per server: external balancing)."""
    size = int(getattr(parallel_config, "data_parallel_size", 1) or 1)
    return 1 if getattr(parallel_config, "data_parallel_external_lb", False) else size


def manifest_header(vllm_config: Any, trace_dir: str | None) -> dict[str, Any]:
    """What every writer of a step's manifest (each rank, the API server) says about the engine."""
    p = vllm_config.parallel_config
    return manifest.engine_header(engine=NAME, engine_version=vllm_version(),
                                  expected_ranks=p.world_size * engines_of(p),
                                  parallel={"tp": p.tensor_parallel_size, "pp": p.pipeline_parallel_size,
                                            "dp": p.data_parallel_size},
                                  trace_dir=trace_dir, plugin_version=PLUGIN_VERSION, nodes=getattr(p, "nnodes", 1),
                                  server=servers.server_name())


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


def data_parallel_rank(worker: Any) -> int | None:
    """The data-parallel rank of the worker's engine where the server runs data-parallel (None: it does
    not, or this is rank 0 of a dense model's, which vLLM runs as independent engines of size one). Each
    engine numbers its workers from 0, so this is what tells two engines' rank 0 apart. vLLM keeps the
    original rank in ``data_parallel_index`` when it resets a dense model's engine to size one."""
    p = worker.vllm_config.parallel_config
    index = getattr(p, "data_parallel_index", None)
    if isinstance(index, int) and index > 0:
        return index
    if int(getattr(p, "data_parallel_size", 1) or 1) <= 1:
        return None
    return int(getattr(p, "data_parallel_rank", 0) or 0)


def rank_name(worker: Any) -> str:
    """The worker's name (``rank_label``): in step logs, manifests, flight dumps and metrics labels."""
    dp = data_parallel_rank(worker)
    return rank_label(worker.rank, {"dp": dp} if dp else None)


def rank_suffix(worker: Any) -> str:
    """vLLM's own worker trace name (0.17+: ``dp0_pp0_tp1_dcp0_ep0_rank1``);
    ``rank<r>`` on releases without it. A data-parallel engine's worker whose
    suffix does not say its data-parallel rank (vLLM's falls back to
    ``rank<r>`` where its groups are not set up) gets it in vLLM's form."""
    try:
        from vllm.distributed.utils import get_worker_rank_suffix
    except ImportError:
        suffix = rank_label(worker.rank)
    else:
        suffix = get_worker_rank_suffix(global_rank=worker.rank)
    dp = data_parallel_rank(worker)
    if dp is not None and not suffix.startswith("dp"):
        tp = int(getattr(worker.vllm_config.parallel_config, "tensor_parallel_size", 1) or 1)
        suffix = vllm_rank_suffix(worker.rank, dp, tp)
    return suffix


def backend_factory(cfg: Any, options: Any) -> Any:
    """The session backend of this worker: torch.profiler, torch_npu on
    Ascend (vllm-ascend's platform says ``npu``) or when asked for, or
    Nsight Systems' ranges with ``"profiler": "cuda"``."""
    from vllm.platforms import current_platform

    settings = torch_settings(cfg)
    kind = which_backend.resolve(options.backend, current_platform.device_type, getattr(cfg, "profiler", None))
    return which_backend.factory(kind, BuildContext(
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
            root_dir=root_of(cfg),
            worker_name=lambda prefix: vllm_worker_name(prefix, suffix),
            rank_name=rank_name(worker),  # the rank's name; its files keep vLLM's suffix
            backend_factory=factory,
            manifest_header=manifest_header(worker.vllm_config, root_of(cfg)),
            forward_count=lambda: worker.__dict__.get(FORWARDS_ATTR, 0),
            node=node_of(worker.vllm_config),
        )
        worker.__dict__[CONTROLLER_ATTR] = ctl
    return ctl


def engine_is_idle(engine: Any) -> bool | None:
    """Whether the engine has no request to step (None: this release does not say). A start
    sent while it is idle tells the workers (``engine_idle``), so a chunked recording's first
    chunk ends at once instead of recording the worker's wait loop until traffic comes."""
    try:
        has_work = getattr(engine, "has_work", None)
        return not has_work() if callable(has_work) else not engine.scheduler.has_requests()
    except Exception:
        return None


def with_engine_state(engine: Any, command: dict) -> dict:
    """A start command with ``engine_idle`` where the engine says so."""
    if command.get("op") == "start" and engine_is_idle(engine):
        return {**command, "engine_idle": True}
    return command
