"""Step metrics: every engine iteration timed into its RL step, traced or not, on every rank.

One room, from the engine thread to ``/metrics`` and the report:
``record`` (the step record and a rank's running totals: one typed
definition, one encoder, one decoder), ``timer`` (the engine thread's
aggregates: two clock reads and a few additions an iteration), ``recorder``
(a rank's timer and log, following the RL step: a weight version, a start, a
mark; guarded), ``engine_hook`` (the one hook of the same shape each engine's
patch module wires it with), ``log`` (one JSON line per finished step per
rank, and the state file, written off the engine thread), ``series`` (the
Prometheus collector, reading the state files at scrape time) and ``reader``
(the logs read back, and a measured step's numbers, for the report).

May import: `config`, `steps`, `store` and the ground.
"""
