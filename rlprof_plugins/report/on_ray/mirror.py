"""The nodes' listings as one tree: which node holds each file, and a stand-in root laid out from it.

A file several nodes list with the same size and time is one file on a
shared filesystem (or the same copy): it is read once, by whichever of them
has read the fewest bytes so far. A path whose size or time differs between
nodes is named, and the newest copy is the one read.

The stand-in root is the tree the report reads on this machine: the small
files the listings carried, whole, with their times; every trace, memory
snapshot and large file as a sparse file of its size and time (no disk
used), a manifest-less trace with a header in front that records the rank
and world size its own does (``naming.trace_distributed`` reads them there).
The report's own code reads it as it reads a local root, and never reads
the traces' events: their passes are answered by the nodes that hold them.
"""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class HeldFile:
    """One file below ROOT and the nodes that hold it as listed."""

    rel: str
    size: int
    mtime_ns: int
    kind: str  # node.kind_of: trace, memory, file
    nodes: list[str] = field(default_factory=list)  # node names, the first listing's first


@dataclass
class Tree:
    files: dict[str, HeldFile] = field(default_factory=dict)
    contents: dict[str, bytes] = field(default_factory=dict)
    distributed: dict[str, dict] = field(default_factory=dict)
    conflicts: list[str] = field(default_factory=list)

    def add(self, node: str, listed: dict[str, Any]) -> None:
        """One node's listing (``node.listing``, unpacked)."""
        for rel, size, mtime_ns, kind in listed["files"]:
            if not stays_inside(rel):
                self.conflicts.append(f"{rel!r}: listed by {node} as a path that leads out of ROOT; not read")
                continue
            held = self.files.get(rel)
            if held is None or (held.size, held.mtime_ns) != (size, mtime_ns):
                if held is not None:
                    newer = (mtime_ns, size) > (held.mtime_ns, held.size)
                    self.conflicts.append(
                        f"{rel}: differs between nodes ({', '.join(held.nodes)}: {held.size:,} bytes; {node}: "
                        f"{size:,} bytes); read {node + chr(39) + 's' if newer else 'the first'} (the newest)")
                    if not newer:
                        continue
                self.files[rel] = HeldFile(rel, size, mtime_ns, kind, [node])
                self.contents.pop(rel, None)
                self.distributed.pop(rel, None)
                if rel in listed.get("contents", {}):
                    self.contents[rel] = listed["contents"][rel]
                if rel in listed.get("distributed", {}):
                    self.distributed[rel] = listed["distributed"][rel]
            else:
                held.nodes.append(node)

    def lay_out(self, base: Path) -> None:
        """The stand-in root at ``base`` (an empty folder of this machine's own)."""
        for rel, held in self.files.items():
            path = base / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "wb") as f:
                if rel in self.contents:
                    f.write(self.contents[rel])
                else:
                    if rel in self.distributed:
                        f.write(stand_in_header(rel, self.distributed[rel]))
                    f.truncate(max(held.size, f.tell()))
            os.utime(path, ns=(held.mtime_ns, held.mtime_ns))


def stays_inside(rel: Any) -> bool:
    """Whether a path a node listed stays inside ROOT: relative, and no ``..`` anywhere in it."""
    return (isinstance(rel, str) and bool(rel) and not os.path.isabs(rel) and "\0" not in rel
            and ".." not in Path(rel).parts)


def stand_in_header(rel: str, distributed: dict) -> bytes:
    """The start of a trace that records ``distributed`` (rank, world size) as Kineto's header does. A
    gzip one holds it in a member as long as the reader's look (``naming.trace_distributed``: 64 KiB,
    blank-padded), so the read ends inside it, before the sparse rest."""
    text = '{"distributedInfo": ' + json.dumps(distributed) + ', "rlprof_stand_in": "'
    if not rel.endswith(".gz"):
        return text.encode()
    return gzip.compress((text + " " * (1 << 16)).encode(), 6)
