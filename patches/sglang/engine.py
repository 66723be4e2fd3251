"""SGLang as the patches see it: the facts they rely on, declared once.

The supported range and its eras, the releases the contract tests run on,
how each era is configured, what depends on the release itself rather than
on a patch, and where the installed version is read. The patches of this
folder, ``rlprof_plugins.compat`` (docs/compatibility.md), ``patches/shapes.py``
and ``rlprof doctor`` read these names; none of them writes a bound of its own.
"""

from __future__ import annotations

NAME = "sglang"
TITLE = "SGLang"
# How the engine loads rlprof: its entry-point group, and the variable that can leave plugins out.
ENTRY_POINTS = "sglang.srt.plugins"
ALLOW_LIST_ENV = "SGLANG_PLUGINS"

# From the oldest supported release to just past the newest tested one. Newer
# releases of the same major are covered by the shape rule (patches/shapes.py).
FIRST = "0.5.5"
BELOW = "0.5.24"
VERSIONS = f">={FIRST},<{BELOW}"  # every release rlprof supports
MANAGER_VERSIONS = f">=0.5.13,<{BELOW}"  # the scheduler's SchedulerProfilerManager
MIXIN_VERSIONS = f">={FIRST},<0.5.13"  # the scheduler's SchedulerProfilerMixin
PLUGIN_ENTRY_POINTS = ">=0.5.12"  # sglang.srt.plugins and the scheduler's on_idle hook

# Releases whose real modules the contract tests run against (tests/compat/releases.py);
# 0.5.23 is also served end to end. Each has its recorded shapes (patches/shape_records/sglang/).
TESTED = ("0.5.5", "0.5.9", "0.5.12", "0.5.13", "0.5.15", "0.5.23")
CI_SUBSET = ("0.5.9", "0.5.15", "0.5.23")

# How profiling is configured on each era (first matching range wins).
HOW_TO_CONFIGURE: tuple[tuple[str, str], ...] = (
    ("<0.5.12", "this release has no plugin entry points: export RLPROF_SGLANG_AUTOLOAD=1 before "
                "launching, then pass --profiler-config '{\"torch_profiler_dir\": \"/traces\", "
                "\"step_start\": 2, \"step_end\": 6}' (or set RLPROF_PROFILER_CONFIG)"),
    ("", "python -m sglang.launch_server ... --profiler-config '{\"torch_profiler_dir\": \"/traces\", "
         "\"step_start\": 2, \"step_end\": 6}' (or set RLPROF_PROFILER_CONFIG)"),
)

# What depends on the release itself rather than on a patch: (name, releases
# that have it, what happens on the others). The contract tests probe each.
CAPABILITIES: tuple[tuple[str, str, str], ...] = (
    ("plugin loaded by SGLang's sglang.srt.plugins entry point", ">=0.5.12",
     "set RLPROF_SGLANG_AUTOLOAD=1 in the launch environment (loads the plugin from rlprof_plugins.pth "
     "in every SGLang process)"),
    ("stop completed from the scheduler's on_idle hook", ">=0.5.12",
     "completed from self_check_during_idle instead (same effect)"),
)


def version() -> str | None:
    """The installed SGLang's version, or None (not installed, or not importable)."""
    try:
        from sglang.version import __version__

        return __version__
    except Exception:
        return None
