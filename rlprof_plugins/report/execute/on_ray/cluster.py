"""The report on a joined Ray cluster (``ClusterSession``): ROOT planned on every node, the passes run where
the files lie.

Tasks ask Ray for no CPU, so they run where the trainer holds every CPU; rlprof keeps at most a quarter
of a node's CPUs reading at a time (``Node.passes``). Every wait has a deadline (``timeout``): a node that
does not plan in time, dies while reading or cannot import rlprof, and a pass that fails, are named by
file and node; a pass whose node dies goes to another node holding the same file first.
"""

from __future__ import annotations

import time
from collections import deque
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, Callable, Iterator, NamedTuple

from .... import __version__
from ..passes import Analysis, PlannedPasses
from ...plan.view import RootView
from ....trace.analysis.trace_stats import TraceStats
from ..wire import WireError, unpack
from .node_views import NodeViews

CPUS_A_PASS = 4  # a node runs one pass at a time for each this many CPUs it has (one at least)
# Ray's failures that mean the node (or its worker) went away mid-task, in plain words
NODE_GONE = {"TaskUnschedulableError": "its node left the cluster", "NodeDiedError": "its node died",
             "WorkerCrashedError": "the worker reading it died", "OwnerDiedError": "its owner died",
             "ObjectLostError": "its answer was lost with its node", "RaySystemError": "Ray failed"}


class TaskFailure(NamedTuple):
    """Why a task gave no answer, in one line, and whether its node (or the worker on it) went away: then
    another node holding the same file can be asked."""

    reason: str
    node_gone: bool


def why_failed(error: BaseException) -> TaskFailure:
    """A task's failure (Ray's ``RayTaskError`` wrapping the pass's error, or Ray's class for a node or
    worker that is gone): what happened, then the class (and the cause's first sentence)."""
    cause = getattr(error, "cause", None)
    source = cause if isinstance(cause, BaseException) else error
    name = type(source).__name__
    if name in NODE_GONE:
        return TaskFailure(f"{NODE_GONE[name]} ({name})", node_gone=True)
    lines = [line.strip() for line in str(source).splitlines()
             if line.strip() and not line.strip().startswith(("File ", "^", "Traceback", "ray::"))]
    text = lines[-1].split(". ")[0] if lines else ""
    return TaskFailure(f"{name}: {text[:200]}" if text else name, node_gone=False)


@dataclass(frozen=True)
class Node:
    """An alive node: its Ray id, and how many passes read on it at once (``passes``): a quarter of its CPUs, one
    at least (each pass holds a trace's events while it reads, and the trainer's work goes on beside it)."""

    id: str
    passes: int


@dataclass(frozen=True)
class Job:
    """One planned pass: a trace's (``path``, ``rank``, ``stage``) or a memory snapshot's (``rank`` None)."""

    path: str
    rank: str | None = None
    stage: str | None = None


def _task(ray: Any) -> Any:
    """The one task: ``node.<name>(*args)`` from the node's own rlprof. It is defined here, so Ray sends it by
    value, and a node where rlprof cannot be imported answers why (``import_error``) instead of failing in
    Ray's unpickling."""

    def on_node(name: str, *args: Any) -> Any:
        try:
            from rlprof_plugins.report.execute.on_ray import node
        except Exception as e:  # no rlprof (or a broken one) on this node
            return {"import_error": f"{type(e).__name__}: {e}"}
        return getattr(node, name)(*args)

    return ray.remote(on_node)


class Waiting:
    """Tasks sent and not yet answered, each with its tag: iterating gives ``(tag, its value or its
    TaskFailure)`` as each finishes, a task sent meanwhile included; those unfinished at the deadline are
    cancelled and answered as timed out. Every few seconds, how many of ``expected`` have answered."""

    def __init__(self, session: "ClusterSession", what: str, expected: int = 0) -> None:
        self.ray, self.timeout, self.say = session.ray, session.timeout, session.say
        self.what, self.expected = what, expected
        self.deadline = time.monotonic() + session.timeout
        self.tags: dict[Any, Any] = {}
        self.pending: list[Any] = []

    def send(self, ref: Any, tag: Any) -> None:
        self.tags[ref] = tag
        self.pending.append(ref)

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        done, said = 0, time.monotonic()
        while self.pending and (left := self.deadline - time.monotonic()) > 0:
            ready, self.pending = self.ray.wait(self.pending, num_returns=1, timeout=min(left, 1.0))
            for ref in ready:
                done += 1
                try:
                    value = self.ray.get(ref, timeout=max(1.0, self.deadline - time.monotonic()))
                except Exception as e:  # the task failed, its node died, its worker crashed
                    value = why_failed(e)
                yield self.tags.pop(ref), value
            if time.monotonic() - said >= 5.0:
                said = time.monotonic()
                self.say(f"Ray: {self.what}: {done} of {self.expected} answered")
        for ref in self.pending:
            with suppress(Exception):
                self.ray.cancel(ref, force=True)
            yield self.tags.pop(ref), TaskFailure(f"no answer within --timeout {self.timeout:g} s", node_gone=False)


class ClusterSession:
    """One report's use of the joined cluster: ROOT planned on every alive node (``plan``), then the planned
    passes run where the files lie (``execute``)."""

    def __init__(self, ray, root_text: str, *, timeout: float, use_cache: bool, say: Callable[[str], None]) -> None:
        self.ray, self.root_text, self.timeout, self.use_cache, self.say = ray, root_text, timeout, use_cache, say
        self.analysis = Analysis("ray")
        self.notes: list[str] = []  # what the nodes said: other releases, what was skipped, folders differing
        self.nodes: dict[str, Node] = {}  # by name: the node's address and the start of its id
        self.runs_rlprof: set[str] = set()  # node names whose plan ran rlprof's own
        self.views = NodeViews()
        self._task = _task(ray)
        for n in ray.nodes():
            if n.get("Alive"):
                cpus = int(float(n.get("Resources", {}).get("CPU", 0)))
                self.nodes[f"{n.get('NodeManagerAddress', '?')}/{n['NodeID'][:8]}"] = Node(
                    n["NodeID"], max(1, cpus // CPUS_A_PASS))

    def _run(self, node: str, name: str, *args: Any, retries: int = 0) -> Any:
        """``node.<name>(*args)`` as a task on ``node`` alone, asking no CPU (the trainer may hold them all)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return self._task.options(name=f"rlprof.{name}", num_cpus=0, max_retries=retries,
                                  scheduling_strategy=NodeAffinitySchedulingStrategy(self.nodes[node].id, soft=False)
                                  ).remote(name, *args)

    # ---- the plan --------------------------------------------------------------------------------
    def plan(self, *, replica: str | None = None, steps: tuple[int, int] | None = None, memory: bool = True,
             windows: bool = True, use_cache: bool = False, every_folder: bool = False) -> RootView:
        """ROOT planned on every alive node, the views merged (``plan.planner.plan_root``'s arguments; nothing
        is kept below ROOT by the plan: ``use_cache`` is the passes')."""
        started = time.monotonic()
        self.say(f"Ray: {len(self.nodes)} alive node(s); planning {self.root_text} on each")
        tasks = Waiting(self, "planning", len(self.nodes))
        for name in self.nodes:
            tasks.send(self._run(name, "plan_here", self.root_text, list(steps) if steps else None, memory, windows),
                         name)
        for name, outcome in tasks:
            if isinstance(outcome, TaskFailure):
                self.analysis.faults.append(f"node {name}: could not plan {self.root_text}: {outcome.reason}")
                continue
            if isinstance(outcome, dict):  # rlprof could not be imported there
                self.analysis.faults.append(f"node {name}: cannot run rlprof ({outcome['import_error']}): what it "
                                            "holds is not read; install rlprof-plugins there")
                continue
            self.analysis.bytes_returned += len(outcome)
            try:
                planned = unpack(outcome)
                self.views.add(name, planned)
            except ValueError as e:  # a node of a release whose plan this one cannot read
                self.analysis.faults.append(f"node {name}: its plan cannot be read by rlprof {__version__} ({e}): "
                                            f"what it holds is not read; install rlprof-plugins {__version__} there")
                continue
            self.runs_rlprof.add(name)
            if planned["version"] != __version__:
                self.analysis.versions[name] = planned["version"]
                self.notes.append(f"node {name} runs rlprof {planned['version']}, this machine {__version__}: "
                                  "its passes are its own release's")
        self.analysis.seconds["planning"] = round(time.monotonic() - started, 3)
        view = self.views.view(self.root_text, replica, steps, every_folder)
        self.notes += self.views.notes
        wanted = {str(j.path) for j in view.trace_jobs()}
        traces = [rel for rel in self.views.sizes if rel in wanted]
        holders = {n for rel in traces for n in self.views.holders[rel]}
        self.say(f"Ray: {len(holders)} node(s) hold {len(traces)} trace(s) "
                 f"({sum(self.views.sizes[t] for t in traces) / 1e6:,.0f} MB) below {self.root_text}; reading each where it lies")
        return view

    # ---- the passes ------------------------------------------------------------------------------
    def execute(self, view: RootView) -> PlannedPasses:
        """Every pass ``view`` names, each on a node that holds its file; their results, to answer the report."""
        jobs = dict.fromkeys([Job(str(j.path), j.rank, j.stage) for j in view.trace_jobs()]
                             + [Job(rel) for rel in view.memory_files()])  # each pass once
        answers = self._read(list(jobs))
        return PlannedPasses(self.analysis, {(j.path, j.rank, j.stage): answers[j] for j in jobs if j.rank is not None},
                             {j.path: answers[j] for j in jobs if j.rank is None})

    def _read(self, jobs: list[Job]) -> dict[Any, Any]:
        """Each pass on a node holding its file, the least loaded first, ``Node.passes`` at a time on each.
        A pass whose node dies (or leaves the cluster) goes to another live holder of the same file (a shared
        filesystem), once per holder; with none left, the file is named unread with the node and the reason."""
        started = time.monotonic()
        tasks = Waiting(self, "reading")
        load: dict[str, int] = {}
        answers: dict[Any, Any] = {}
        queued: dict[str, deque[Job]] = {name: deque() for name in self.nodes}  # placed, not yet sent
        running: dict[str, int] = {name: 0 for name in self.nodes}
        gone: set[str] = set()  # nodes that died or left during the passes (a pass is given to each node once)

        def place(job: Job) -> str | None:
            """Queue the pass on the least loaded live holder of its file (None: none)."""
            able = [n for n in self.views.holders.get(job.path, []) if n in self.runs_rlprof and n not in gone]
            if not able:
                return None
            node = min(able, key=lambda n: (load.get(n, 0), n))
            load[node] = load.get(node, 0) + self.views.sizes[job.path]
            queued[node].append(job)
            return node

        def send_queued(node: str) -> None:
            """Send ``node``'s queued passes while it reads fewer than it may and the deadline is ahead (what
            is still queued at the deadline is named unread below)."""
            while (node not in gone and queued[node] and running[node] < self.nodes[node].passes
                   and time.monotonic() < tasks.deadline):
                job = queued[node].popleft()
                if job.rank is not None:
                    self.analysis.traces_per_node[node] = self.analysis.traces_per_node.get(node, 0) + 1
                    ref = self._run(node, "trace_pass", self.root_text, job.path, job.rank, job.stage,
                                    self.use_cache, retries=1)
                else:
                    ref = self._run(node, "memory_pass", self.root_text, job.path, retries=1)
                tasks.send(ref, (job, node))
                running[node] += 1

        size = self.views.sizes
        for job in sorted(jobs, key=lambda j: -size.get(j.path, 0)):
            if place(job) is None:
                holders = ", ".join(self.views.holders.get(job.path, [])) or "no node"
                answers[job] = self._unread(job.path, holders, "no node that holds it can run rlprof")
            elif job.rank is not None:
                self.analysis.trace_bytes += size[job.path]
        tasks.expected = len(jobs) - len(answers)
        for node in self.nodes:
            send_queued(node)
        for (job, node), outcome in tasks:
            running[node] -= 1
            if isinstance(outcome, TaskFailure) and outcome.node_gone:
                gone.add(node)
                if job.rank is not None:
                    self.analysis.traces_per_node[node] -= 1
                left_behind, queued[node] = [job, *queued[node]], deque()
                for waiting in left_behind:  # to another live holder of the same file
                    other = place(waiting)
                    if other is None:
                        answers[waiting] = self._unread(waiting.path, node, outcome.reason)
                        continue
                    when = "while reading it" if waiting is job else "before reading it"
                    self.notes.append(f"{waiting.path}: node {node} went away {when} ({outcome.reason}); "
                                      f"read on node {other}")
                    send_queued(other)
                continue
            send_queued(node)
            answers[job] = self._answer(job, node, outcome)
        for node, unsent in queued.items():  # never sent before the deadline
            for job in unsent:
                answers[job] = self._unread(job.path, node, f"no answer within --timeout {self.timeout:g} s")
        self.analysis.traces_per_node = {n: k for n, k in self.analysis.traces_per_node.items() if k > 0}
        self.analysis.nodes = sorted(self.analysis.traces_per_node)
        self.analysis.seconds["passes"] = round(time.monotonic() - started, 3)
        return answers

    def _answer(self, job: Job, node: str, outcome: Any) -> Any:
        """A pass's result as the report takes it: a trace's summary, a snapshot's numbers, or why it is unread."""
        if isinstance(outcome, TaskFailure):
            return self._unread(job.path, node, outcome.reason)
        blob = outcome
        if job.rank is not None:
            blob, cached, seconds = outcome
            self.analysis.seconds["on_nodes"] = round(self.analysis.seconds.get("on_nodes", 0.0) + seconds, 3)
            self.analysis.node_cache_hits += int(cached)
        self.analysis.bytes_returned += len(blob)
        try:
            got = unpack(blob)
            wanted = TraceStats if job.rank is not None else dict
            if not isinstance(got, wanted):
                raise WireError(f"a {type(got).__name__}, not a {wanted.__name__}")
        except WireError as e:  # a node of another release
            return self._unread(job.path, node, f"its answer cannot be read by rlprof {__version__} ({e})")
        if job.rank is None:
            return got if "error" not in got else self._unread(job.path, node, got["error"])
        if got.error:  # a corrupt trace: named as the local report names it, and by the node that read it
            got.error = self._unread(job.path, node, got.error)
        return got

    def _unread(self, rel: str, node: str, reason: str) -> str:
        self.analysis.unread.append({"path": rel, "node": node, "reason": reason})
        return f"{rel}: not read on node {node}: {reason}"
