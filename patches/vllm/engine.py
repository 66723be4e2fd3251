"""vLLM as the patches see it: the facts they rely on, declared once.

The supported range and its eras, the releases the contract tests run on,
how each era is configured, what depends on the release itself rather than
on a patch, and where the installed version is read. The patches of this
folder, ``rlprof_plugins.compat`` (docs/compatibility.md), ``patches/shapes.py``
and ``rlprof doctor`` read these names; none of them writes a bound of its own.
"""

from __future__ import annotations

NAME = "vllm"
TITLE = "vLLM"
# How the engine loads rlprof: its entry-point group, and the variable that can leave plugins out.
ENTRY_POINTS = "vllm.general_plugins"
ALLOW_LIST_ENV = "VLLM_PLUGINS"

# From the oldest supported release to just past the newest tested one. Newer
# releases of the same major are covered by the shape rule (patches/shapes.py).
FIRST = "0.10"
BELOW = "0.34"
VERSIONS = f">={FIRST},<{BELOW}"  # every release rlprof supports
CONFIG_VERSIONS = f">=0.13,<{BELOW}"  # releases with ProfilerConfig and --profiler-config
ENV_ERA_VERSIONS = f">={FIRST},<0.13"  # VLLM_TORCH_PROFILER_* only

# Releases whose real modules the contract tests run against, unpacked from
# their published wheels (tests/compat/releases.py), except the one installed
# in the test environment, which tests/e2e also serves end to end (0.32: 0.33
# has no CPU build). Each has its recorded shapes (patches/shape_records/vllm/).
TESTED = ("0.10.2.post2", "0.12.0.post2", "0.13.0", "0.15.1", "0.16.0", "0.17.1", "0.24.0", "0.32.0", "0.33.0")
CI_SUBSET = ("0.12.0.post2", "0.16.0", "0.32.0", "0.33.0")  # one per era boundary that matters most

# How profiling is configured on each era (first matching range wins).
HOW_TO_CONFIGURE: tuple[tuple[str, str], ...] = (
    ("<0.13", "no --profiler-config on this release: set RLPROF_PROFILER_CONFIG='{\"torch_profiler_dir\": "
              "\"/traces\", \"step_start\": 2, \"step_end\": 6}' (same JSON keys) in the server's "
              "environment and start it with `vllm serve`; VLLM_TORCH_PROFILER_DIR is not needed"),
    ("<0.16", "vllm serve --profiler-config '{\"profiler\": \"torch\", \"torch_profiler_dir\": \"/traces\", "
              "\"step_start\": 2, \"step_end\": 6}'; do not also set VLLM_TORCH_PROFILER_* (on this release "
              "they override the flag)"),
    ("", "vllm serve --profiler-config '{\"profiler\": \"torch\", \"torch_profiler_dir\": \"/traces\", "
         "\"step_start\": 2, \"step_end\": 6}'"),
)

# What depends on the release itself rather than on a patch: (name, releases
# that have it, what happens on the others). The contract tests probe each.
CAPABILITIES: tuple[tuple[str, str, str], ...] = (
    ("stop answered before the profiler stops", ">=0.17",
     "EngineCore has no idle callbacks: the stop (torch's, seconds with stacks) runs on the engine loop "
     "before the answer; export still runs in the background"),
    ("prefill/decode from vLLM's compute_iteration_details", ">=0.15",
     "rlprof's own rule: a cached request scheduled for more than one token counts as prefill "
     "(speculative decoding steps too)"),
    ("vLLM's rank names in trace files (dp0_pp0_tp0_..._rank0)", ">=0.17", "files are named rank<r>"),
)

# The devices torch.profiler records on each vLLM platform when the config names none.
PLATFORM_ACTIVITIES = {"cpu": ("CPU",), "cuda": ("CPU", "CUDA"), "xpu": ("CPU", "XPU")}


def version() -> str | None:
    """The installed vLLM's version, or None (not installed, or not importable)."""
    try:
        from vllm.version import __version__

        return __version__
    except Exception:
        return None
