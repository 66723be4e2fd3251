"""vllm-ascend as the patches see it: the facts they rely on, declared once.

vllm-ascend is a vLLM platform plugin with versions of its own; the vLLM
entry point installs its patches (``rlprof_plugins.entry_points.vllm``). No CPU
build runs here: its patches are tested against its released source with a
torch_npu stand-in (tests/npu, docs/npu.md).
"""

from __future__ import annotations

NAME = "vllm-ascend"
TITLE = "vllm-ascend"
VERSIONS = ">=0.23,<0.24"  # the vllm-ascend releases whose source was checked


def version() -> str | None:
    """The installed vllm-ascend's version (an unpacked source tree's too), or None."""
    try:
        from importlib.metadata import version as installed

        return installed("vllm-ascend")
    except Exception:
        try:
            from vllm_ascend._version import __version__  # an unpacked source tree

            return __version__
        except Exception:
            return None
