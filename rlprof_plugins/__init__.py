"""rlprof-plugins: engine-side profiling plugins for RL rollout servers.

One folder per concept, from the top layer down (docs/architecture.md, "The
rooms"; ``tests/unit/test_layers.py`` checks that imports only run down):
``cli`` (the ``rlprof`` command), ``client`` (the trainer side),
``entry_points`` (what the engines load), ``patches`` (the engine patches: the
top-level ``patches/`` folder of the source tree), ``session`` (when to
record), ``config`` (what the user asks), ``steps`` (which RL step),
``backends`` (how to record), ``trace`` (reading and writing traces) and
``store`` (what lands on disk). Nothing in the core imports an engine.
"""

__version__ = "0.2.0"
