"""What the engines logged beside their step folders, read back: for the report and ``rlprof summary``.

The engine side (``metrics``) writes each rank's step log, each frontend's
busy periods and the flight recorder's dumps from inside the engine's
processes; this room reads them back in another process, never in an engine.
``steps`` (the step logs, and a measured step's numbers in the report's
terms), ``requests`` (the busy periods, and the requests that held a step),
``anomalies`` (each dump's ``anomaly.json``).

May import: `metrics` (the records and file names the engine side writes) and `store`.
"""
