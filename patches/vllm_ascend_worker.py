"""vllm-ascend: the same worker hooks on its ``NPUWorker``.

vllm-ascend replaces vLLM's worker class with
``vllm_ascend.worker.worker.NPUWorker``, which derives from ``WorkerBase``,
not from vLLM's GPU ``Worker``: the ``vllm.worker.profile`` patch never sees
an Ascend worker. ``NPUWorker`` has the same ``execute_model``,
``sample_tokens``, ``profile(is_start, profile_prefix)`` and ``shutdown``, so
the same wrappers apply; sessions record with the ``npu`` backend there
(``backend: auto`` resolves to it because vllm-ascend's platform reports the
``npu`` device type). Without this patch vllm-ascend's own
``TorchNPUProfilerWrapper`` records from start to stop, without windows.
"""

from __future__ import annotations

from .base import Patch
from .vllm_worker import FEATURE, _execute_model, _profile, _sample_tokens, _shutdown

VERSIONS = ">=0.23,<0.24"  # the vllm-ascend releases whose source was checked


def vllm_ascend_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("vllm-ascend")
    except Exception:
        try:
            from vllm_ascend._version import __version__  # an unpacked source tree

            return __version__
        except Exception:
            return None


NPU_WORKER_PATCH = Patch(
    name="vllm_ascend.worker.profile",
    engine="vllm-ascend",
    versions=VERSIONS,
    module="vllm_ascend.worker.worker",
    feature=FEATURE + " on Ascend",
    why=(
        "vllm-ascend's NPUWorker is not a subclass of vLLM's Worker and profiles with one "
        "TorchNPUProfilerWrapper from start to stop; count iterations and run rlprof sessions there too"
    ),
    upstream="the same per-session profiler factory and iteration hook in NPUWorker",
    wrap={
        "NPUWorker.execute_model": _execute_model,
        "NPUWorker.sample_tokens": _sample_tokens,
        "NPUWorker.profile": _profile,
        "NPUWorker.shutdown": _shutdown,
    },
    optional=("NPUWorker.sample_tokens",),
)

PATCHES = (NPU_WORKER_PATCH,)
