"""The report read where the traces live: ``rlprof report ROOT --ray [ADDRESS]`` (and ``summary``).

A fleet's traces lie on its nodes' own disks (or on a filesystem every node
reads slowly). On the Ray cluster the trainer already runs, each alive node
plans what it holds below ROOT with the local report's planner
(``node.plan_here``), each trace's pass (``trace_stats``: iterations,
stages, device time, operators) runs as a Ray task pinned by node affinity
to a node that holds the file (``node.trace_pass``, with a cache of passes on
that node), and only summaries travel (``report.execute.wire``). The command joins
the cluster as a Ray driver in its own process (``driver``), merges the
nodes' views into one (``cluster``), has the nodes run the passes it names,
and renders the report from the view and their results as a local report
does. Ray's scheduling, transfers, retries and failure detection do the
distributing; every wait has a timeout, and what could not be read is
named by file and node.

Ray is optional (``rlprof-plugins[ray]``): only this package imports it, and
only when ``--ray`` is given; the engines' plugins never do.
"""
