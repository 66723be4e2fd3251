"""The trace format: Chrome/Kineto trace files read, written and named.

``reader``/``writer``/``codec``/``gz`` (streaming at the speed of gzip: a
trace of gigabytes in flat memory), ``repair`` (a file cut short or with
torch's broken quotes), ``check`` (a file's integrity), ``clock`` (a trace's
clock: ``baseTimeNanoseconds``, absolute timestamps), ``naming`` (every trace,
rank and category name, Kineto's older categories read as today's),
``rank_files`` (the records of a step's rank traces and their merges),
``pauses`` (rlprof's own marks in a trace: its profiler's pauses),
``sampler_account`` (what the stack sampler cost, in a trace's metadata) and
``progress`` (the long passes' progress lines). What every other room of
``trace`` stands on.

May import: the base modules.
"""
