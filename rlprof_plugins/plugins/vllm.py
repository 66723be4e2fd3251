"""The ``vllm.general_plugins`` entry point.

vLLM calls ``register()`` once in each process (API server, EngineCore,
every worker). It only registers post-import hooks; each patch applies when
its target module is imported (at once if it already is), so loading the
plugin imports nothing heavy. Set ``RLPROF_DISABLE=1`` to turn it off, or
leave ``rlprof`` out of vLLM's ``VLLM_PLUGINS`` allowlist.
"""

from __future__ import annotations

from .._log import logger
from . import disabled

_registered = False


def vllm_version() -> str | None:
    try:
        from vllm.version import __version__

        return __version__
    except Exception:
        return None


def register() -> None:
    global _registered
    if _registered or disabled():
        return
    _registered = True
    try:
        from ..patches import VLLM_PATCHES
        from ..patches.base import install_on_import

        for patch in VLLM_PATCHES:
            install_on_import(patch, vllm_version)
    except Exception as e:  # a plugin must never stop vLLM from starting
        logger.warning("rlprof: vLLM plugin not loaded: %s: %s", type(e).__name__, e)
