"""The step report (``rlprof report``, ``rlprof summary``): what changed between global steps, and where each
rank's time went, in three stages, a folder each.

- ``plan``: ROOT read once (``planner.plan_root``) into a ``view.RootView``: every server, its step folders'
  manifests and files, its measured steps (``measured_rows``, kept in brief: ``brief``), its flight recorder
  dumps, and every pass the page needs.
- ``execute``: those passes run where the files are (``passes``: here or in a pool, through the cache of
  passes; ``on_ray``: on the Ray nodes that hold them; ``wire``: a result as it travels and is kept).
- ``render``: the rows, notes and outputs made from the view and the results alone (``build``).

A stage imports only the stages before it.

May import: `step_logs`, `metrics`, `trace`, `store` and the base modules.
"""
