"""The ``vllm.general_plugins`` entry point.

vLLM calls ``register()`` once in each process (API server, EngineCore,
every worker). It only registers post-import hooks; each patch applies when
its target module is imported (at once if it already is), so loading the
plugin imports nothing heavy. Set ``RLPROF_DISABLE=1`` to turn it off, or
leave ``rlprof`` out of vLLM's ``VLLM_PLUGINS`` allowlist.
"""

from __future__ import annotations

from . import install_group

GROUP = "vllm.general_plugins"  # setup.cfg's group for this module; patches/engines.py lists what it installs


def register() -> None:
    from .._log import join_engine_log

    join_engine_log("vllm")  # rlprof's lines in vLLM's log, in its format and at its level
    install_group(GROUP)  # vLLM's patches and vllm-ascend's (a platform plugin of vLLM)
