"""Step metrics and the flight recorder: every engine iteration timed into its RL step, traced or not,
on every rank, and the last minute of them kept to write when one went wrong.

One room, from the engine thread to ``/metrics`` and the report:
``record`` (the step record and a rank's running totals: one typed
definition, one encoder, one decoder), ``timer`` (the engine thread's
aggregates: two clock reads and a few additions an iteration), ``tail`` (a
rollout step's long tail and how full the engine ran), ``requests`` (the
requests that held a step, kept by the engine's frontend), ``recorder``
(a rank's timer and log, following the RL step: a weight version, a start, a
mark; guarded), ``engine_hook`` (the one hook of the same shape each engine's
patch module wires it with), ``log`` (one JSON line per finished step per
rank, and the state file, written off the engine thread), ``series`` (the
Prometheus collector, reading the state files at scrape time), ``reader``
(the logs read back, and a measured step's numbers, for the report),
``flight`` (the flight recorder: a ring of the last ``seconds`` of
iterations, pauses and sampled stacks, and the triggers against the
engine's own recent past) and ``flight_dump`` (a dump written and read back).

May import: `config`, `step_sources`, `backends` (a frame's name), `trace` (the sampled stacks' category), `store` and the base modules.
"""
