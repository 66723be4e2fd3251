"""Sessions: when to record (``controller``, ``window``, ``states``) apart from how (``recording``).

The workers' ``ProfilerController`` and the API server's ``FrontendRecorder``
decide when; both record through ``Recording`` (the engine thread's side)
and write through its ``RecordingOutput`` (the exporter thread's), and
report to the step manifest through ``exporter.report``. Nothing here imports
torch or an engine.

May import: `metrics` (the step logs' file names), `config`, `backends`, `trace`, `store` and the base modules.
"""
