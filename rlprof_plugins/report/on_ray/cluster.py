"""The Ray process of ``rlprof report --ray``: join the cluster, list ROOT on every node, and run the
report's passes where the files lie.

The report's process starts this module as a child (``driver.open_session``)
and never imports Ray itself. Here ``ray.init`` joins the cluster, every
alive node lists what it holds below ROOT (``node.listing``), the listings
are merged into one ``store.listing.Listing`` and sent back; then each pass
the report planned runs as a Ray task on a node that holds its file, and the
results are sent back (``channel``). Ray's driver prints its cluster's
messages (a raylet's last log lines when a node dies) on this process's
standard output and error, which are a pipe the report's process reads.

Every wait has a deadline (``timeout``): a node that does not list in time,
dies while reading, or cannot import rlprof, and a trace whose pass fails,
are named (``unread``, ``faults``) by file and node; the report keeps what
the other nodes read. A pass whose node dies goes to another node that holds
the same file (a filesystem they share) before it is named unread.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from ... import __version__
from ..._parallel import die_with_parent
from ...store.listing import Listing
from ..analysis import Analysis
from ..wire import unpack
from .channel import NEEDS_RAY, ChannelClosed, Kind, NoCluster, RayMissing, Receiver, send
from .failures import TaskFailure, why_failed


def import_ray():
    try:
        import ray
    except ImportError:
        raise RayMissing(NEEDS_RAY) from None
    return ray


@dataclass
class Node:
    id: str
    ip: str
    cpus: float

    @property
    def name(self) -> str:
        return f"{self.ip}/{self.id[:8]}"


def _remote_functions(ray):
    """The tasks, sent by value so a node that cannot import rlprof still answers: each imports the
    node's own rlprof and calls it; the listing falls back to names and sizes alone."""

    def list_root(root_text: str) -> bytes:
        try:
            from rlprof_plugins.report.on_ray.node import listing
        except Exception as e:  # no rlprof (or a broken one) on this node: name what it holds all the same
            import json
            import os
            import zlib

            files, root = [], os.path.abspath(os.path.expanduser(os.path.expandvars(root_text)))
            for top, dirs, names in os.walk(root):
                dirs[:] = [d for d in dirs if not d.startswith(".")]
                for name in names:
                    path = os.path.join(top, name)
                    if os.path.isfile(path) and not os.path.islink(path):
                        st = os.stat(path)
                        kind = "trace" if name.endswith((".trace.json", ".trace.json.gz")) else "file"
                        files.append([os.path.relpath(path, root), st.st_size, st.st_mtime_ns, kind])
            # the wire's own format (``wire.pack``: compressed JSON), written without rlprof
            return zlib.compress(json.dumps({"import_error": f"{type(e).__name__}: {e}", "files": files,
                                             "exists": os.path.isdir(root), "root": root}).encode(), 6)
        return listing(root_text)

    def read_trace(root_text: str, rel: str, rank: str, stage, use_cache: bool):
        from rlprof_plugins.report.on_ray.node import trace_pass

        return trace_pass(root_text, rel, rank, stage, use_cache)

    def read_memory(root_text: str, rel: str) -> bytes:
        from rlprof_plugins.report.on_ray.node import memory_pass

        return memory_pass(root_text, rel)

    return ray.remote(list_root), ray.remote(read_trace), ray.remote(read_memory)


class ClusterSession:
    """One report's use of the cluster, once joined: ROOT listed on every alive node, then the passes run."""

    def __init__(self, ray, root_text: str, *, timeout: float, use_cache: bool, say: Callable[[str], None]) -> None:
        self.ray, self.root_text, self.timeout, self.use_cache, self.say = ray, root_text, timeout, use_cache, say
        self.analysis = Analysis("ray")
        self.notes: list[str] = []  # what the listings said: other releases, what was skipped, files differing
        self.listing = Listing(root_text)
        self.nodes: dict[str, Node] = {}
        self.runs_rlprof: set[str] = set()  # node names whose listing ran rlprof's own
        self._list, self._trace, self._memory = _remote_functions(ray)

    # ---- listing -------------------------------------------------------------------------------
    def list_root(self) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        started = time.monotonic()
        for n in self.ray.nodes():
            if n.get("Alive"):
                node = Node(n["NodeID"], n.get("NodeManagerAddress", "?"), float(n.get("Resources", {}).get("CPU", 0)))
                self.nodes[node.name] = node
        self.say(f"Ray: {len(self.nodes)} alive node(s); listing {self.root_text} on each")
        refs = {self._list.options(num_cpus=0, max_retries=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
            node.id, soft=False)).remote(self.root_text): name for name, node in self.nodes.items()}
        for ref, name, outcome in self._gather(refs, started + self.timeout, "listing"):
            if isinstance(outcome, TaskFailure):
                self.analysis.faults.append(f"node {name}: could not list {self.root_text}: {outcome.reason}")
                continue
            self.analysis.bytes_returned += len(outcome)
            listed = unpack(outcome)
            if "import_error" in listed:
                self.analysis.faults.append(f"node {name}: cannot run rlprof ({listed['import_error']})"
                                            + (f"; it holds {len(listed['files'])} file(s) below {listed['root']}, "
                                               "named unread" if listed["files"] else ""))
            else:
                self.runs_rlprof.add(name)
                if listed["version"] != __version__:
                    self.analysis.versions[name] = listed["version"]
                    self.notes.append(f"node {name} runs rlprof {listed['version']}, this machine {__version__}: "
                                      "its passes are its own release's")
                self.notes += [f"node {name}: {line}" for line in listed["skipped"]]
            if listed.get("exists"):
                self.listing.add(name, listed)
        self.notes += self.listing.conflicts
        self.analysis.seconds["listing"] = round(time.monotonic() - started, 3)
        traces = [h for h in self.listing.files.values() if h.kind == "trace"]
        holders = {n for h in self.listing.files.values() for n in h.nodes}
        self.say(f"Ray: {len(holders)} node(s) hold {len(traces)} trace(s) ({sum(h.size for h in traces) / 1e6:,.0f} MB) "
                 f"below {self.root_text}; reading each where it lies")

    # ---- the passes ------------------------------------------------------------------------------
    def read(self, traces: list[tuple], memories: list[str]) -> tuple[dict[tuple, Any], dict[str, Any]]:
        """Each pass on a node holding its file, the least loaded first. A pass whose node dies (or leaves the
        cluster) goes to another live holder of the same file (a shared filesystem), once per holder; with none
        left, the file is named unread with the node and the reason."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        started = time.monotonic()
        load: dict[str, int] = {}
        answers: dict[tuple, Any] = {}
        memory: dict[str, Any] = {}
        refs: dict[Any, tuple] = {}
        again: list[Any] = []  # refs of passes given to another holder while the others are gathered
        gone: set[str] = set()  # nodes that died or left during the passes
        tried: dict[Any, set[str]] = {}  # a job -> the nodes it was given to

        def place(rel: str, job: Any) -> str | None:
            held = self.listing.files.get(rel)
            able = [n for n in (held.nodes if held else []) if n in self.runs_rlprof and n not in gone
                    and n not in tried.get(job, ())]
            if not able:
                return None
            node = min(able, key=lambda n: (load.get(n, 0), n))
            load[node] = load.get(node, 0) + held.size
            tried.setdefault(job, set()).add(node)
            return node

        def options(node: str, cpus: float = 1.0):
            return dict(num_cpus=min(cpus, self.nodes[node].cpus), max_retries=1,
                        scheduling_strategy=NodeAffinitySchedulingStrategy(self.nodes[node].id, soft=False))

        def submit(kind: str, job: Any) -> Any:
            """The pass's task on a holder of its file (None: no holder is left to ask)."""
            rel = job[0] if kind == "trace" else job
            node = place(rel, (kind, job))
            if node is None:
                return None
            if kind == "trace":
                self.analysis.traces_per_node[node] = self.analysis.traces_per_node.get(node, 0) + 1
                ref = self._trace.options(**options(node)).remote(self.root_text, *job, self.use_cache)
            else:
                ref = self._memory.options(**options(node)).remote(self.root_text, rel)
            refs[ref] = (kind, job, node)
            return ref

        for job in sorted(traces, key=lambda j: -(self.listing.files[j[0]].size if j[0] in self.listing.files else 0)):
            if submit("trace", job) is None:
                answers[job] = self._unread(job[0], self._holders(job[0]), "no node that holds it can run rlprof")
            else:
                self.analysis.trace_bytes += self.listing.files[job[0]].size
        for rel in memories:
            if submit("memory", rel) is None:
                memory[rel] = self._unread(rel, self._holders(rel), "no node that holds it can run rlprof")
        for _ref, (kind, job, node), outcome in self._gather(refs, started + self.timeout, "reading", again):
            rel = job[0] if kind == "trace" else job
            if isinstance(outcome, TaskFailure):
                if outcome.node_gone:
                    gone.add(node)
                    if kind == "trace":
                        self.analysis.traces_per_node[node] -= 1
                    other = submit(kind, job)
                    if other is not None:  # another live holder of the same file reads it
                        again.append(other)
                        self.notes.append(f"{rel}: node {node} went away while reading it ({outcome.reason}); "
                                           f"read on node {refs[other][2]}")
                        continue
                reason = self._unread(rel, node, outcome.reason)
                if kind == "trace":
                    answers[job] = reason
                else:
                    memory[job] = reason
                continue
            if kind == "memory":
                self.analysis.bytes_returned += len(outcome)
                got = unpack(outcome)
                memory[job] = got if "error" not in got else self._unread(job, node, got["error"])
                continue
            blob, cached, seconds = outcome
            self.analysis.seconds["on_nodes"] = round(self.analysis.seconds.get("on_nodes", 0.0) + seconds, 3)
            self.analysis.bytes_returned += len(blob)
            self.analysis.node_cache_hits += int(cached)
            st = answers[job] = unpack(blob)
            if st.error:  # a corrupt trace: named as the local report names it, and by the node that read it
                st.error = self._unread(job[0], node, st.error)
        self.analysis.traces_per_node = {n: k for n, k in self.analysis.traces_per_node.items() if k > 0}
        self.analysis.nodes = sorted(self.analysis.traces_per_node)
        self.analysis.seconds["passes"] = round(time.monotonic() - started, 3)
        return answers, memory

    def _holders(self, rel: str) -> str:
        held = self.listing.files.get(rel)
        return ", ".join(held.nodes) if held else "no node"

    def _unread(self, rel: str, node: str, reason: str) -> str:
        self.analysis.unread.append({"path": rel, "node": node, "reason": reason})
        return f"{rel}: not read on node {node}: {reason}"

    def _gather(self, refs: dict[Any, Any], deadline: float, what: str,
                again: list[Any] | None = None) -> Iterator[tuple[Any, Any, Any]]:
        """``(ref, its tag, its value or its TaskFailure)`` for each ref, as they finish; refs the caller puts in
        ``again`` (and in ``refs``) while it handles one are gathered too. Those unfinished at the deadline are
        cancelled and answered as timed out."""
        ray = self.ray
        pending = list(refs)
        done = 0
        said = time.monotonic()
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            ready, pending = ray.wait(pending, num_returns=1, timeout=min(left, 1.0))
            for ref in ready:
                done += 1
                try:
                    value = ray.get(ref, timeout=max(1.0, deadline - time.monotonic()))
                except Exception as e:  # the task failed, its node died, its worker crashed
                    value = why_failed(e)
                yield ref, refs[ref], value
            if again:
                pending += again
                again.clear()
            if time.monotonic() - said >= 5.0:
                said = time.monotonic()
                self.say(f"Ray: {what}: {done} of {len(refs)} answered")
        for ref in pending:
            try:
                ray.cancel(ref, force=True)
            except Exception:
                pass
            yield ref, refs[ref], TaskFailure(f"no answer within --timeout {self.timeout:g} s", node_gone=False)


PROBE_SECONDS = 10.0  # a cluster address that does not take a connection in this long has no cluster


def check_reachable(address: str, seconds: float) -> None:
    """A ``host:port`` that takes no TCP connection has no cluster: said now (``ray.init`` would wait on
    it for good)."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or "://" in address:
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=seconds).close()
    except OSError as e:
        raise NoCluster(f"--ray {address}: no Ray cluster to join (nothing answers there: {e.strerror or e})") from None



def main() -> int:
    """``python -m rlprof_plugins.report.on_ray.cluster FD ORDERS``: ``FD`` the pipe to answer on, ``ORDERS``
    (JSON) the root, address, timeout and cache choice; later orders come on standard input."""
    out = os.fdopen(int(sys.argv[1]), "wb")
    order = json.loads(sys.argv[2])
    die_with_parent(order["parent"])
    root_text, address, timeout = order["root"], order["address"], order["timeout"]
    try:
        ray = import_ray()
        check_reachable(os.environ.get("RAY_ADDRESS", "") if address == "auto" else address,
                        min(timeout, PROBE_SECONDS))
        send(out, Kind.JOINING)
        try:
            ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
        except Exception as e:
            first = str(e).splitlines()[0][:200] if str(e) else ""
            raise NoCluster(f"--ray {address}: no Ray cluster to join ({type(e).__name__}: {first})") from None
    except (RayMissing, NoCluster) as e:
        send(out, Kind.FAILED, error=type(e).__name__, message=str(e))
        return 0
    send(out, Kind.JOINED)
    try:
        session = ClusterSession(ray, root_text, timeout=timeout, use_cache=order["use_cache"],
                                 say=lambda text: send(out, Kind.SAY, text=text))
        session.list_root()
        send(out, Kind.LISTED, listing=session.listing.as_plain(), analysis=dataclasses.asdict(session.analysis),
             notes=session.notes)
        orders = Receiver(sys.stdin.fileno())
        while True:
            try:
                kind, fields = orders.receive()
            except ChannelClosed:  # the report is made: leave the cluster
                return 0
            if kind is Kind.READ:
                traces, memory = session.read(fields["traces"], fields["memory"])
                send(out, Kind.READ, traces=traces, memory=memory, analysis=dataclasses.asdict(session.analysis),
                     notes=session.notes)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
