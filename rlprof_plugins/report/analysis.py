"""Where a report read its traces and what travelled: the JSON's ``analysis`` object.

``engine`` is ``local`` (this machine read them) or ``ray`` (each on the
node holding it: ``on_ray``); ``nodes`` the machines that read traces,
``traces_per_node`` how many each read, ``trace_bytes`` their size, and
``bytes_returned`` the serialized summaries (and listings) that came back
over the network: 0 for a local run. A local run counts the traces it read
this time (a step its cache answered reads none); a run on Ray counts every
trace it covers (each node's cache answers on the node, and its summary
still travels).
"""

from __future__ import annotations

import socket
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

from ..trace.analysis import trace_stats as trace_stats_module
from ..trace.format.gz import file_size


@dataclass
class Analysis:
    engine: str
    nodes: list[str] = field(default_factory=list)
    traces_per_node: dict[str, int] = field(default_factory=dict)
    trace_bytes: int = 0
    bytes_returned: int = 0
    node_cache_hits: int = 0
    unread: list[dict[str, str]] = field(default_factory=list)  # {"path", "node", "reason"}
    faults: list[str] = field(default_factory=list)  # nodes that could not list ROOT or run rlprof
    versions: dict[str, str] = field(default_factory=dict)  # nodes whose rlprof is another release
    seconds: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = {"engine": self.engine, "nodes": self.nodes, "traces_per_node": self.traces_per_node,
               "trace_bytes": self.trace_bytes, "bytes_returned": self.bytes_returned}
        if self.engine == "ray":
            out.update(node_cache_hits=self.node_cache_hits, unread=self.unread, faults=self.faults,
                       versions=self.versions, seconds=self.seconds)
        return out

    @property
    def faulty(self) -> bool:
        """Something below ROOT could not be read, or a node could not list it."""
        return bool(self.unread or self.faults)


@contextmanager
def counted_here() -> Iterator[Analysis]:
    """A local run's analysis: the traces this machine's passes read (``trace_stats.passes_here``)."""
    analysis = Analysis("local", nodes=[socket.gethostname()])
    here = trace_stats_module.passes_here

    def counting(jobs, progress):
        analysis.traces_per_node[analysis.nodes[0]] = analysis.traces_per_node.get(analysis.nodes[0], 0) + len(jobs)
        analysis.trace_bytes += sum(file_size(path) for path, _, _ in jobs)
        return here(jobs, progress)

    token = trace_stats_module.PASSES_ELSEWHERE.set(counting)
    try:
        yield analysis
    finally:
        trace_stats_module.PASSES_ELSEWHERE.reset(token)
