"""rlprof-plugins: engine-side profiling plugins for RL rollout servers.

The package is split along the data path: ``options`` (configuration keys),
``requests`` (one start request), ``layout`` (where files go), ``window``
(which engine iterations are recorded), ``session`` (one profiling session
per worker), ``backends`` (how to record), and ``plugins`` (the thin
per-engine entry points). Engine-specific patches live in
``rlprof_plugins.patches`` (the top-level ``patches/`` folder of the source
tree). Nothing in the core imports an engine.
"""

__version__ = "0.1.0"
