"""The step report (``rlprof report``, ``rlprof summary``): what changed between global steps, and where each
rank's time went, in three stages, a folder each.

- ``plan``: ROOT read once (``planner.plan_root``) into a ``view.RootView``: every server, its step folders'
  manifests and files, the step logs' numbers (``measured_rows``, in brief: ``brief``; their store:
  ``state_store``), the flight recorder's dumps, and every pass the page needs.
- ``execute``: those passes run (``passes``: the trace and memory passes, here or in a pool, with the cache of
  passes; ``on_ray``: on the Ray nodes that hold the files; ``wire``: a result as it travels and as the cache
  keeps it; ``analysis``: where they ran).
- ``render``: the rows, notes and outputs from the view and the results alone (``build``: notes, JSON, CSV;
  ``steps``, ``fleet``, ``summary``, ``compare``; the page: ``page``, ``step_section``, ``fleet_view``,
  ``rollout_view``, ``charts``, ``flame``, ``anomalies``, ``memory``, ``ranks``).

A stage imports only the stages before it.

May import: `step_logs`, `metrics`, `trace`, `store` and the base modules.
"""
