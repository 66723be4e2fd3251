"""The ``sglang.srt.plugins`` entry point.

SGLang calls ``register()`` through ``load_plugins()`` in the launcher (HTTP
server and TokenizerManager), ``sglang.Engine`` and every scheduler process.
Like the vLLM entry point it only registers post-import hooks; each patch
applies when its target module is imported. ``RLPROF_DISABLE=1`` or leaving
``rlprof`` out of ``SGLANG_PLUGINS`` turns it off.
"""

from __future__ import annotations

from .._log import logger
from . import disabled

_registered = False


def sglang_version() -> str | None:
    try:
        from sglang.version import __version__

        return __version__
    except Exception:
        return None


def register() -> None:
    global _registered
    if _registered or disabled():
        return
    _registered = True
    try:
        from ..patches import SGLANG_PATCHES
        from ..patches.base import install_on_import

        for patch in SGLANG_PATCHES:
            install_on_import(patch, sglang_version)
    except Exception as e:  # a plugin must never stop SGLang from starting
        logger.warning("rlprof: SGLang plugin not loaded: %s: %s", type(e).__name__, e)
