"""rlprof-plugins: engine-side profiling plugins for RL rollout servers.

One folder per concept, from the top layer down (docs/architecture.md, "The
rooms"; ``tests/unit/test_layers.py`` checks that imports only run down):
``cli`` (the ``rlprof`` command), ``report`` (the step report), ``client``
(the trainer side), ``entry_points`` (what the engines load), ``patches`` (the
engine patches, a folder per engine), ``session`` (when to record),
``step_logs`` (the engines' step logs read back), ``metrics`` (the step metrics
kept inside the engine), ``config`` (what the user asks), ``step_sources``
(which RL step), ``backends`` (how to record), ``store`` (what lands on disk)
and ``trace`` (reading and writing traces). Only ``patches`` imports an engine,
and only inside the engine's own process; the rest is the engine-agnostic core.
"""

__version__ = "0.2.0"
