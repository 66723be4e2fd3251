"""Patch module (worker processes): vLLM's ``"profiler": "cuda"`` on a platform without CUDA.

With ``"profiler": "cuda"`` rlprof runs the sessions with its cuda backend
(``rlprof_plugins.backends.cuda_profiler``): NVTX ranges per global step and
iteration, and a cudaProfilerStart/Stop capture range where the worker sees
CUDA. vLLM's worker checks the profiler against its platform when it is
built (``validate_worker_profiler_config``, 0.32+) and refuses ``cuda`` on
CPU and XPU, so a server that Nsight Systems would trace for its NVTX ranges
alone (a CPU rehearsal, rlprof's own tests) could not start. Where rlprof
handles the config, the check lets ``cuda`` through; every other profiler
and config is checked by vLLM as before. Nothing changes on CUDA platforms,
where vLLM accepts ``cuda`` itself.
"""

from __future__ import annotations

from ..base import Patch
from ..features import CUDA_PROFILER_ANYWHERE
from .config import plugin_handles
from .facts import CONFIG_VERSIONS


def _validate(wrapped, instance, args, kwargs):
    cfg = args[0] if args else kwargs.get("profiler_config")
    if getattr(cfg, "profiler", None) == "cuda" and plugin_handles(cfg):
        return None  # rlprof records it: NVTX ranges everywhere, the capture calls where CUDA is
    return wrapped(*args, **kwargs)


VALIDATE_PATCH = Patch(
    name="vllm.cuda_profiler.platform_check",
    engine="vllm",
    versions=CONFIG_VERSIONS,  # "profiler": "cuda" is a ProfilerConfig value (0.13+)
    module="vllm.v1.worker.gpu_worker",
    feature=CUDA_PROFILER_ANYWHERE,
    why=("the worker refuses \"profiler\": \"cuda\" on CPU and XPU (validate_worker_profiler_config, 0.32+); "
         "rlprof's cuda backend emits its NVTX ranges there and skips only the capture calls"),
    upstream="a platform check that lets a plugin's profiler through",
    wrap={"validate_worker_profiler_config": _validate},
    optional=("validate_worker_profiler_config",),  # releases before 0.32 check nothing
)

PATCHES = (VALIDATE_PATCH,)
