"""verl's facts, declared once: what the names mean is in ``patches/engines.py``.

verl is a trainer, not an engine: it drives vLLM or SGLang in-process from
Ray actors (``vLLMHttpServer``, ``SGLangHttpServer``). rlprof patches those
actors only to hand the RL step to the engine patches
(``rlprof_plugins.step_sources.trainer``); the engine's own patches do the rest.

- ``ENTRY_POINTS``: verl imports every ``verl.plugins`` entry point when
  ``verl`` itself is imported (in the trainer and in every actor process that
  unpickles a verl class); ``VERL_USE_EXTERNAL_PLUGINS`` (``auto``, ``none``
  or a list of names) can leave rlprof out.
- ``SERVER_MODULES``: the server actors' modules, by engine.
- ``WEIGHTS_VERSION_ATTR``: the attribute each server actor's
  ``set_global_steps`` sets at every weight sync (``None`` before the first).
- ``PROFILER_ATTR``, ``REPLICA_RANK_ATTR``, ``REPLICA_FOLDER``: the actor's
  rollout profiler and replica rank, and the folder below the profiler's
  ``save_path`` verl names for each replica's engine (``rollout_trace_dir``).
- ``ENGINE_ATTRS``: where each server actor holds its engine, by engine:
  ``vLLMHttpServer.engine`` (the ``AsyncLLM``, set by ``launch_server`` on the
  server's first node only) and ``SGLangHttpServer.tokenizer_manager``.
"""

from __future__ import annotations

NAME = "verl"
TITLE = "verl"
ENTRY_POINTS = "verl.plugins"
ALLOW_LIST_ENV = "VERL_USE_EXTERNAL_PLUGINS"
ENTRY_POINT_NAME = "rlprof"

FIRST = "0.9.1"  # rollout profiling on by default (verl #7408); the entry-point group
BELOW = "0.10"
VERSIONS = f">={FIRST},<{BELOW}"

TESTED = ("0.9.1",)  # the newest release on PyPI
CI_SUBSET = ("0.9.1",)

SERVER_MODULES = {
    "vllm": "verl.workers.rollout.vllm_rollout.vllm_async_server",
    "sglang": "verl.workers.rollout.sglang_rollout.async_sglang_server",
}
WEIGHTS_VERSION_ATTR = "global_steps"
ENGINE_ATTRS = {"vllm": "engine", "sglang": "tokenizer_manager"}
PROFILER_ATTR = "profiler_controller"  # the actor's DistProfiler: its config (save_path), check_enable()
REPLICA_RANK_ATTR = "replica_rank"
REPLICA_FOLDER = "agent_loop_rollout_replica_{rank}"  # verl's rollout_trace_dir below save_path


def version() -> str | None:
    """The installed verl's version, without importing verl (it imports Ray and more), or None."""
    try:
        from importlib.metadata import version as installed

        return installed("verl")
    except Exception:
        return None


def plugin_allowed() -> bool:
    """Whether verl loads rlprof's entry point under ``VERL_USE_EXTERNAL_PLUGINS``."""
    import os

    policy = os.environ.get(ALLOW_LIST_ENV, "auto").strip().lower()
    if policy == "none":
        return False
    return policy == "auto" or ENTRY_POINT_NAME in {name.strip() for name in policy.split(",")}
