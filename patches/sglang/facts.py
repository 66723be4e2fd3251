"""SGLang's facts, declared once: what the names mean is in ``patches/engines.py``.

SGLang's eras: the scheduler's profiler moved from a mixin into
``SchedulerProfilerManager`` in 0.5.13; plugin entry points and the
scheduler's ``on_idle`` hook arrived in 0.5.12.
"""

from __future__ import annotations

NAME = "sglang"
TITLE = "SGLang"
ENTRY_POINTS = "sglang.srt.plugins"
ALLOW_LIST_ENV = "SGLANG_PLUGINS"

FIRST = "0.5.5"
BELOW = "0.5.24"
VERSIONS = f">={FIRST},<{BELOW}"  # every release rlprof supports
MANAGER_VERSIONS = f">=0.5.13,<{BELOW}"  # the scheduler's SchedulerProfilerManager
MIXIN_VERSIONS = f">={FIRST},<0.5.13"  # the scheduler's SchedulerProfilerMixin
PLUGIN_ERA = ">=0.5.12"  # sglang.srt.plugins and the scheduler's on_idle hook

# 0.5.23 is also served end to end.
TESTED = ("0.5.5", "0.5.9", "0.5.12", "0.5.13", "0.5.15", "0.5.23")
CI_SUBSET = ("0.5.9", "0.5.15", "0.5.23")

HOW_TO_CONFIGURE: tuple[tuple[str, str], ...] = (
    ("<0.5.12", "this release has no plugin entry points: export RLPROF_SGLANG_AUTOLOAD=1 before "
                "launching, then pass --profiler-config '{\"torch_profiler_dir\": \"/traces\", "
                "\"step_start\": 2, \"step_end\": 6}' (or set RLPROF_PROFILER_CONFIG)"),
    ("", "python -m sglang.launch_server ... --profiler-config '{\"torch_profiler_dir\": \"/traces\", "
         "\"step_start\": 2, \"step_end\": 6}' (or set RLPROF_PROFILER_CONFIG)"),
)

CAPABILITIES: tuple[tuple[str, str, str], ...] = (
    ("plugin loaded by SGLang's sglang.srt.plugins entry point", PLUGIN_ERA,
     "set RLPROF_SGLANG_AUTOLOAD=1 in the launch environment (loads the plugin from rlprof_plugins.pth "
     "in every SGLang process)"),
    ("stop completed from the scheduler's on_idle hook", PLUGIN_ERA,
     "completed from self_check_during_idle instead (same effect)"),
    # ServerArgs.weight_version (--weight-version, set by update_weights_from_* and
    # /update_weight_version where the release has them): every supported release
    ("global-step folders from the engine's weight version (step_source)", VERSIONS,
     "no SGLang release rlprof supports lacks it"),
)


def version() -> str | None:
    """The installed SGLang's version, or None."""
    try:
        from sglang.version import __version__

        return __version__
    except Exception:
        return None
