"""The report read where the traces live: ``rlprof report ROOT --ray [ADDRESS]`` (and ``summary``).

The command joins the trainer's Ray cluster from its own process (``driver``); each alive node plans
what it holds below ROOT with the local planner (``node.plan_here``), the views are merged into one
(``node_views``), each pass runs as a Ray task on a node holding its file (``cluster``), and only
summaries travel. Ray is optional (``rlprof-plugins[ray]``): only this package imports it, only for
``--ray``; the engines' plugins never do.
"""
