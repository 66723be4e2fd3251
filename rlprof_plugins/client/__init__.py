"""Trainer-side control of profiling on every rollout server (no engine needed).

    from rlprof_plugins.client import RolloutProfiler

    profiler = RolloutProfiler(router="http://router:30000", steps=[5, 10], step_end=20)
    for global_step in range(num_steps):
        with profiler.step(global_step):
            rollout()

``http`` makes one JSON call with the standard library, ``discovery`` finds
the servers behind a router, ``profiler`` sends each action to all servers
at once, ``answers`` reads what each server answered, ``results`` holds
every server's outcome; ``commands`` is ``rlprof start|stop|status|collect``.

May import: `metrics` (the step logs' file names, the flight dump's route), `config`, `store` and the base modules.
"""

from .discovery import DiscoveryError, Server
from .profiler import RolloutProfiler, StepRun
from .results import FleetError, FleetResult, ServerResult

__all__ = ["DiscoveryError", "FleetError", "FleetResult", "RolloutProfiler", "Server", "ServerResult", "StepRun"]
