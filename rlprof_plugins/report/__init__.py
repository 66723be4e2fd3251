"""The step report (``rlprof report``): what changed between global steps, and where each rank's time went.

An application over the trace tools and the step metrics, which it reads
only through their public functions: ``steps`` (one row per global step below
a root, from the same streaming pass and the same definitions as ``rlprof
summary``: ``trace.analysis.trace_stats``, ``trace.analysis.step_numbers``), ``measured_rows``
(rows for steps measured by the step metrics and not traced:
``step_logs.steps``), ``ranks`` (each rank's time, the files), ``memory`` (each
rank's memory snapshot), ``cache`` (a step's row kept while its files hold),
``compare`` (``--compare``), ``charts`` (inline SVG), ``page`` and
``step_section`` (the offline page), ``build`` (notes, JSON, CSV) and
``summary`` (``rlprof summary``: a root's steps in brief).

May import: `step_logs`, `metrics`, `trace`, `store` and the base modules.
"""
