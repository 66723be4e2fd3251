"""vLLM EngineCore: one utility method that carries rlprof commands to workers.

vLLM's ``profile`` utility passes only ``(is_start, prefix, delay, max)``.
Our commands (global step, window, status) are dicts, so EngineCore gets a
``rlprof_control`` utility that forwards a dict to every worker through
``collective_rpc`` and returns their replies. It runs on the engine loop
between steps, like ``profile``.
"""

from __future__ import annotations

from typing import Any

from .base import Patch
from .vllm_profiler_config import VERSIONS

UTILITY = "rlprof_control"


def rlprof_control(self: Any, command: dict) -> list[dict]:
    from .vllm_worker import worker_control

    try:
        return list(self.model_executor.collective_rpc(worker_control, args=(command,)))
    except Exception as e:  # reported to the caller, never raised into the loop
        return [{"ok": False, "error": f"{type(e).__name__}: {e}"}]


ENGINE_CORE_PATCH = Patch(
    name="vllm.engine_core.control",
    engine="vllm",
    versions=VERSIONS,
    module="vllm.v1.engine.core",
    feature="rlprof step windows and global-step folders",
    why="the native profile utility cannot carry a global step or a status query",
    upstream="a profile utility taking a request object",
    add={"EngineCore." + UTILITY: rlprof_control},
)

PATCHES = (ENGINE_CORE_PATCH,)
