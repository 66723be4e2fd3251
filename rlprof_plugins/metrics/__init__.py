"""Step metrics and the flight recorder: every engine iteration timed into its RL step, traced or not,
on every rank, and the last minute of them kept to write when one went wrong.

What runs in the engine's processes, from the engine thread to ``/metrics`` (the report reads what
this room writes through ``step_logs``):
``record`` (the step record and a rank's running totals: one typed
definition, one encoder, one decoder), ``timer`` (the engine thread's
aggregates: two clock reads and a few additions an iteration), ``tail`` (a
rollout step's long tail and how full the engine ran), ``requests`` (the
requests that held a step, kept by the engine's frontend), ``recorder``
(a rank's timer and log, following the RL step: a weight version, a start, a
mark; guarded), ``engine_hook`` (the one hook of the same shape each engine's
patch module wires it with), ``log`` (one JSON line per finished step per
rank, and the state file, written off the engine thread), ``series`` (the
Prometheus collector, reading the state files at scrape time),
``flight`` (the flight recorder: a ring of the last ``seconds`` of
iterations, pauses and sampled stacks, and the triggers against the
engine's own recent past), ``flight_dump`` (a dump written) and
``flight_ledger`` (the dumps' sizes, for their disk bound).

May import: `config`, `step_sources`, `backends` (a frame's name), `trace` (the sampled stacks' category), `store` and the base modules.
"""
