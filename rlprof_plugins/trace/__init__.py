"""The trace tools: read, write, name, merge, split, stitch, summarise and check Chrome/Kineto traces.

``naming`` (every trace and rank name), ``reader``/``writer``/``codec``/``gz``
(streaming at the speed of gzip), ``merge``, ``stage_split``, ``stitch``,
``check``, ``align``/``clock`` (ranks' clocks), ``sources`` (a step folder's
rank files), ``pauses`` and ``repair``; the analyses: ``iteration_names``,
``trace_stats``, ``time_split``, ``communication`` (which kernels are
communication, by the libraries that launch them), ``device_time``,
``step_numbers`` (the one definition of a step's numbers) and ``summary``. Pure Python, no engine imports; the step
report (``report``) is an application built on these.

May import: `store` and the ground.
"""
