"""Patch module (worker processes on Ascend): the same worker hooks on its ``NPUWorker``.

vllm-ascend replaces vLLM's worker class with
``vllm_ascend.worker.worker.NPUWorker``, which derives from ``WorkerBase``,
not from vLLM's GPU ``Worker``: the ``vllm.worker.profile`` patch never sees
an Ascend worker. ``NPUWorker`` has the same ``execute_model``,
``sample_tokens``, ``profile(is_start, profile_prefix)`` and ``shutdown``, so
the vLLM worker patch's factory applies; sessions record with the ``npu``
backend there (``backend: auto`` resolves to it because vllm-ascend's
platform reports the ``npu`` device type). Without this patch vllm-ascend's
own ``TorchNPUProfilerWrapper`` records from start to stop, without windows.
"""

from __future__ import annotations

from .. import features
from ..vllm.worker_hooks import worker_patch
from .facts import NAME, VERSIONS

NPU_WORKER_PATCH = worker_patch(
    name="vllm_ascend.worker.profile",
    engine=NAME,
    versions=VERSIONS,
    module="vllm_ascend.worker.worker",
    cls="NPUWorker",
    feature=features.STEP_WINDOWS_ON_ASCEND,
    why=(
        "vllm-ascend's NPUWorker is not a subclass of vLLM's Worker and profiles with one "
        "TorchNPUProfilerWrapper from start to stop; count iterations and run rlprof sessions there too"
    ),
    upstream="the same per-session profiler factory and iteration hook in NPUWorker",
)

PATCHES = (NPU_WORKER_PATCH,)
