"""The report read where the traces live: ``rlprof report ROOT --ray [ADDRESS]`` (and ``summary``).

A fleet's traces lie on its nodes' own disks (or on a filesystem every node
reads slowly). On the Ray cluster the trainer already runs, each alive node
lists what it holds below ROOT (``node.listing``), each trace's pass
(``trace_stats``: iterations, stages, device time, operators) runs as a Ray
task pinned by node affinity to a node that holds the file (``node.trace_pass``,
with a cache of passes on that node), and only the passes' summaries travel
(``wire``). The machine running the command lays the listed tree out as a
stand-in root (``mirror``: the small files whole, the large ones as sparse
files of their size and time) and runs the same report over it as a local
run does, its passes answered by the nodes (``driver``). Ray's scheduling,
transfers, retries and failure detection do the distributing; every wait has
a timeout, and what could not be read is named by file and node.

Ray is optional (``rlprof-plugins[ray]``): only this package imports it, and
only when ``--ray`` is given; the engines' plugins never do.
"""
