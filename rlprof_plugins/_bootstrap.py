"""Load the plugins from interpreter start-up where engines do not (in time).

``rlprof_plugins.pth`` imports this module when any interpreter starts
(including every process an engine spawns). It installs a one-shot import
hook (no wrapt, no engine import: a few microseconds) that registers a
plugin right after a watched module is imported:

- ``vllm.entrypoints.llm`` -> the vLLM plugin. vLLM loads general plugins
  inside ``EngineArgs.__post_init__``, but ``LLM.__init__`` filters
  ``profiler_config={...}`` down to the keys vLLM declares before that, so
  our keys would be dropped silently for in-process users (verl builds
  ``LLM`` this way). Honours ``VLLM_PLUGINS`` like the entry point.
- ``sglang.srt.server_args`` -> the SGLang plugin, only when
  ``RLPROF_SGLANG_AUTOLOAD=1``: SGLang releases before 0.5.12 have no
  ``sglang.srt.plugins`` entry-point group, and every scheduler process
  imports ``server_args`` first (SGLang spawns them, so each runs this
  ``.pth`` again with the inherited variable). Opt-in, because it loads
  the plugin into every SGLang process of that environment.

``RLPROF_DISABLE=1`` turns both off.
"""

import sys

from ._env import allowed_by, on

VLLM_TARGET = "vllm.entrypoints.llm"
SGLANG_TARGET = "sglang.srt.server_args"
SGLANG_AUTOLOAD = "RLPROF_SGLANG_AUTOLOAD"


def _register(engine: str) -> None:
    try:
        if engine == "vllm":
            from rlprof_plugins.entry_points.vllm import register
        else:
            from rlprof_plugins.entry_points.sglang import register
        register()
    except Exception as e:  # start-up of the interpreter must never fail here
        sys.stderr.write(f"rlprof: early {engine} plugin load failed: {e}\n")


class _LoadPluginAfterImport:
    """A meta-path finder that only watches its targets, once each."""

    def __init__(self, targets: dict):
        self.targets = dict(targets)  # module name -> engine

    def find_spec(self, fullname, path=None, target=None):
        engine = self.targets.pop(fullname, None)
        if engine is None:
            return None
        if not self.targets:
            sys.meta_path.remove(self)
        from importlib.util import find_spec

        spec = find_spec(fullname)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module):
            original(module)
            _register(engine)

        loader.exec_module = exec_module
        return spec


def targets() -> dict:
    """The modules to watch in this process, given its environment."""
    if on("RLPROF_DISABLE"):
        return {}
    out = {}
    if allowed_by("VLLM_PLUGINS") and VLLM_TARGET not in sys.modules:
        out[VLLM_TARGET] = "vllm"
    if on(SGLANG_AUTOLOAD) and SGLANG_TARGET not in sys.modules:
        out[SGLANG_TARGET] = "sglang"
    return out


def install() -> None:
    watched = targets()
    if watched:
        sys.meta_path.insert(0, _LoadPluginAfterImport(watched))
