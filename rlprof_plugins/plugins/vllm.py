"""The ``vllm.general_plugins`` entry point.

vLLM calls ``register()`` once in each process (API server, EngineCore,
every worker). It only registers post-import hooks; each patch applies when
its target module is imported (at once if it already is), so loading the
plugin imports nothing heavy. Set ``RLPROF_DISABLE=1`` to turn it off, or
leave ``rlprof`` out of vLLM's ``VLLM_PLUGINS`` allowlist.
"""

from __future__ import annotations

from . import install_patches


def vllm_version() -> str | None:
    try:
        from vllm.version import __version__

        return __version__
    except Exception:
        return None


def register() -> None:
    from .._log import join_engine_log

    join_engine_log("vllm")  # rlprof's lines in vLLM's log, in its format and at its level
    install_patches("vLLM", "VLLM_PATCHES", vllm_version)
    install_patches("vllm-ascend", "VLLM_ASCEND_PATCHES", vllm_ascend_version)


def vllm_ascend_version() -> str | None:
    from ..patches.vllm_ascend_worker import vllm_ascend_version as version_of

    return version_of()
