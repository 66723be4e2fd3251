"""The ``sglang.srt.plugins`` entry point.

SGLang calls ``register()`` through ``load_plugins()`` in the launcher (HTTP
server and TokenizerManager), ``sglang.Engine`` and every scheduler process.
Like the vLLM entry point it only registers post-import hooks; each patch
applies when its target module is imported. ``RLPROF_DISABLE=1`` or leaving
``rlprof`` out of ``SGLANG_PLUGINS`` turns it off.
"""

from __future__ import annotations

from . import install_group

GROUP = "sglang.srt.plugins"  # setup.cfg's group for this module; patches/engines.py lists what it installs


def register() -> None:
    install_group(GROUP)
