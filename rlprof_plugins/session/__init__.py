"""Sessions: when to record (``controller``, ``window``, ``states``) apart from how (``recording``).

The workers' ``ProfilerController`` and the API server's ``FrontendRecorder``
decide when; both record through ``Recording`` and report to the step
manifest through ``exporter.report``. Nothing here imports torch or an engine.
"""
