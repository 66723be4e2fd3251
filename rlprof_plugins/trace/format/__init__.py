"""The trace format: Chrome/Kineto trace files read, written and named.

``reader``/``writer``/``codec``/``gz`` (streaming at the speed of gzip: a
trace of gigabytes in flat memory), ``repair`` (a file cut short or with
torch's broken quotes), ``check`` (a file's integrity), ``clock`` (a trace's
clock: ``baseTimeNanoseconds``, absolute timestamps), ``naming`` (every trace,
rank and category name, Kineto's older categories read as today's),
``sources`` (a step folder's rank files), ``pauses`` (rlprof's own marks in a
trace: its profiler's pauses), ``progress`` and ``spill`` (the long passes'
progress lines and columns spilled to disk). What every other room of
``trace`` stands on.

May import: `store` and the ground.
"""
