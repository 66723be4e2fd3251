"""What traces say: a trace's iterations, its operators' and device's time, its Python frames, a step's numbers,
and a memory snapshot's (the allocator's own trace of the window).

``iteration_names`` (which ranges are engine iterations: rlprof's, the
engines' own annotations, torch's), ``trace_stats`` (one pass over a trace:
its iterations, operators, device work and Python frames), ``time_split``
(operators' self time), ``communication`` (which kernels are communication,
by the libraries that launch them), ``device_time`` (the device's time split
at the iterations' edges), ``python_stacks`` (the frames per stage, exact or
sampled), ``step_numbers`` (the one definition of a step's numbers),
``spill`` (the long passes' columns kept on disk, not in memory) and
``memory_snapshot`` (each rank's device memory over the window).

May import: `format` and the base modules.
"""
