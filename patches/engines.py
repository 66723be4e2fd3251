"""The engines rlprof patches, each with its facts module (``<engine>/engine.py``).

One place to look an engine's facts up by its name: ``shapes`` (the newest
tested release), ``rlprof_plugins.compat`` (the compatibility table) and
``rlprof doctor`` read them through ``ENGINES``. vllm-ascend is a platform
plugin of vLLM with no tested-release table of its own (docs/npu.md).
"""

from __future__ import annotations

from types import ModuleType

from .sglang import engine as sglang
from .vllm import engine as vllm
from .vllm_ascend import engine as vllm_ascend

# Engines with tested releases, in the order the docs show them.
ENGINES: dict[str, ModuleType] = {vllm.NAME: vllm, sglang.NAME: sglang}
PLATFORM_PLUGINS: dict[str, ModuleType] = {vllm_ascend.NAME: vllm_ascend}
