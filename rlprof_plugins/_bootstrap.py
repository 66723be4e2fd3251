"""Load the vLLM plugin before ``vllm.entrypoints.llm`` is first used.

vLLM loads general plugins inside ``EngineArgs.__post_init__``, but
``LLM.__init__`` filters ``profiler_config={...}`` down to the keys vLLM
declares before that, so our keys would be dropped silently for in-process
users (verl builds ``LLM`` this way). ``rlprof_plugins.pth`` imports this
module at interpreter start-up; it installs a one-shot import hook (no
wrapt, no vLLM import: a few microseconds) that registers the plugin right
after ``vllm.entrypoints.llm`` is imported, honouring ``VLLM_PLUGINS`` and
``RLPROF_DISABLE`` like the entry point does.
"""

import os
import sys

TARGET = "vllm.entrypoints.llm"
PLUGIN_NAME = "rlprof"


def _allowed() -> bool:
    if os.environ.get("RLPROF_DISABLE", "").lower() in ("1", "true", "yes"):
        return False
    allow = os.environ.get("VLLM_PLUGINS")
    return allow is None or PLUGIN_NAME in [p.strip() for p in allow.split(",")]


def _register() -> None:
    try:
        from rlprof_plugins.plugins.vllm import register

        register()
    except Exception as e:  # start-up of the interpreter must never fail here
        sys.stderr.write(f"rlprof: early plugin load failed: {e}\n")


class _LoadPluginAfterImport:
    """A meta-path finder that only watches ``TARGET``, once."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != TARGET:
            return None
        sys.meta_path.remove(self)
        from importlib.util import find_spec

        spec = find_spec(fullname)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module):
            original(module)
            _register()

        loader.exec_module = exec_module
        return spec


def install() -> None:
    if _allowed() and TARGET not in sys.modules:
        sys.meta_path.insert(0, _LoadPluginAfterImport())
