"""Patch module (worker processes): vLLM's ``Worker`` runs rlprof sessions with step windows.

Native ``Worker.profile`` builds one profiler on the first start and
``WorkerProfiler.step()`` counts windows with an off-by-one. We give each
worker an rlprof ``ProfilerController`` (fresh backend per session, exact
half-open windows, auto-export at ``step_end``: the ``control`` helper) and
tell it when each engine iteration begins and ends (the ``worker_hooks``
helper, shared with vllm-ascend's NPU worker).
"""

from __future__ import annotations

from ..features import STEP_WINDOWS
from .config import PROFILER_CONFIG_FIELDS
from .facts import VERSIONS
from .worker_hooks import worker_patch

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
