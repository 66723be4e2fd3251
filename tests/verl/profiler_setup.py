"""verl's own profiler objects for a rollout replica, as verl's server actor builds them.

``vLLMHttpServer.__init__``/``SGLangHttpServer.__init__`` turn the rollout
config's ``profiler`` section into a ``ProfilerConfig``, a tool config and a
``DistProfiler`` (``build_rollout_dist_profiler``); ``start_profile`` and
``stop_profile`` read only these. This builds them with verl's own classes
and functions, for the test actors' stand-in ``__init__``: the rollout
section a user writes (``tool: torch``, ``enable``, ``save_path``,
``discrete``), nothing else.
"""

from __future__ import annotations


def attach(server, save_path: str, *, relocate_results: bool = False, replica_rank: int = 0) -> None:
    """Set what verl's ``__init__`` sets on ``server`` for its profile methods (verl's defaults: the rollout's
    profile on replica 0 alone, ``all_ranks=False``; ``replica_rank``: which replica this server is)."""
    from verl.utils.profiler import build_rollout_dist_profiler
    from verl.utils.profiler.config import ProfilerConfig, TorchProfilerToolConfig, rollout_profiler_global_ranks

    tool_config = TorchProfilerToolConfig(contents=[], discrete=True)
    config = ProfilerConfig(tool="torch", enable=True, all_ranks=False, ranks=[], save_path=save_path,
                            tool_config={"torch": tool_config}, relocate_results=relocate_results)
    server.node_rank = 0
    server.replica_rank = replica_rank
    server.replica_world_size = 1
    server.global_steps = None  # "model weights version, set by ServerAdapter when update weights"
    server.profiler_controller = build_rollout_dist_profiler(replica_rank, 1, config=config, tool_config=tool_config)
    server.profiler_keep_global_ranks = rollout_profiler_global_ranks(config)
