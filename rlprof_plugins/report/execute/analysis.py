"""Where a report read its traces and what travelled: the JSON's ``analysis`` object.

``engine`` is ``local`` (this machine read them) or ``ray`` (each on the
node holding it: ``on_ray``); ``nodes`` the machines that read traces,
``traces_per_node`` how many each read, ``trace_bytes`` their size, and
``bytes_returned`` the serialized summaries (and the nodes' plans) that came back
over the network: 0 for a local run. A local run counts the traces it read
this time (a step its cache answered reads none); a run on Ray counts every
trace it covers (each node's cache answers on the node, and its summary
still travels).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
