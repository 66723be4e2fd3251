"""SGLang's facts, declared once: what the names mean is in ``patches/engines.py``.

SGLang's eras: the scheduler's profiler moved from a mixin into
``SchedulerProfilerManager`` in 0.5.13; plugin entry points and the
scheduler's ``on_idle`` hook arrived in 0.5.12.
"""

from __future__ import annotations

from ..bypassing_frontends import Frontend

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
# one per era: 0.5.9 before plugin entry points and the profiler manager, 0.5.23 after both (it is also
# served end to end); make compat runs the rest
CI_SUBSET = ("0.5.9", "0.5.23")

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

# The backends a session records with on each release, and what picks each (rlprof doctor's "backends").
BACKENDS: tuple[tuple[str, str, str], ...] = (
    ("torch", "", "activities CPU/GPU (auto, on every device but Ascend)"),
    ("npu", "", "an Ascend device (auto), or \"backend\": \"npu\""),
    ("cuda", "", "activities [\"CUDA_PROFILER\"] in a start request, or \"profiler\": \"cuda\" in --profiler-config "
                 "(docs/nsys.md)"),
)

# Frontends that bypass the HTTP server and TokenizerManager rlprof patches (patches/bypassing_frontends.py).
# gRPC mode is a server argument: the launcher patch (server_args.py) sets GRPC_MODE_ENV for the schedulers.
GRPC_MODE_ENV = "RLPROF_SGLANG_GRPC_MODE"
RUST_SERVER_ENV = "SGLANG_RUST_SERVER"
FRONTENDS: tuple[Frontend, ...] = (
    Frontend(
        name="SGLang's gRPC mode (the SMG gRPC server)", chosen_by="--smg-grpc-mode or --grpc-mode",
        variable=GRPC_MODE_ENV, versions=">=0.5.9",
        works=("from 0.5.15 its HTTP sidecar's POST /start_profile and /stop_profile (SGLang's own fields: "
               "output_dir, start_step, num_steps, activities with MEM, profile_prefix; with_stack or record_shapes "
               "false) run rlprof sessions in the schedulers: the configured window, by_stage, chunks, the manifest, "
               "merge, files written off the scheduler thread, and global-step folders from step_source "
               "weight_version or profile_prefix (global_step_<N>); releases before 0.5.15 have no profiling route "
               "in gRPC mode"),
        lacks=("global_step and rlprof's fields in the body (the sidecar forwards SGLang's only), "
               "GET /profile_status (read the step folder's manifest.json), 400s naming a field (the sidecar answers "
               "500 with rlprof's message)"),
        marker="grpc_mode",
    ),
    Frontend(
        name="SGLang's Rust server", chosen_by=f"{RUST_SERVER_ENV}=1", variable=RUST_SERVER_ENV, versions=">=0.5.23",
        works=("nothing of rlprof's: the plugin loads in the schedulers, but the Rust server serves no "
               "/start_profile, so no session can start"),
        lacks="every profiling request; serve without SGLANG_RUST_SERVER to profile",
        marker=RUST_SERVER_ENV,
    ),
)
# Every file of SGLang 0.5.23 that names /start_profile (make compat-latest reports any other as new).
PROFILE_ROUTES = {
    "sglang/srt/entrypoints/http_server.py": "the HTTP server's routes (patches/sglang/http.py)",
    "sglang/srt/entrypoints/grpc_server.py": "gRPC mode's HTTP sidecar (FRONTENDS; patches/sglang/native_requests.py)",
    "sglang/srt/disaggregation/encoder/http_server.py": ("an encoder-only server (--encoder-only, encoder "
                                                         "disaggregation): profiles the encoder, not covered"),
    "sglang/srt/managers/scheduler_components/profiler_manager.py": "a log message",
    "sglang/srt/environ.py": "a comment",
    "sglang/profiler.py": "a client (python -m sglang.profiler)",
    "sglang/benchmark/serving.py": "a client (bench_serving --profile)",
    "sglang/lang/backend/runtime_endpoint.py": "a client (the frontend language's runtime endpoint)",
}


def version() -> str | None:
    """The installed SGLang's version, or None."""
    try:
        from sglang.version import __version__

        return __version__
    except Exception:
        return None
