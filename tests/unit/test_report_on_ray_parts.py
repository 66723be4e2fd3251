"""The parts of ``rlprof report --ray`` that run without a cluster (issue 70): each node's plan of what it
holds (``node.plan_here``: the local report's planner), the nodes' plans merged (``node_views.NodeViews``),
the report rendered from the merged view and the passes' results (the local report's JSON, and no file
opened by the renderer, locally or over the nodes' plans), the pass with its cache, what a blob may hold,
and a task's failure in one line.

The cluster itself (Ray's nodes, node affinity, a node killed, a node without rlprof) is
tests/ray/test_report_on_ray.py.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import sys
import zlib
from pathlib import Path

import pytest

from rlprof_plugins.report.execute import wire
from rlprof_plugins.report.execute.passes import Analysis
from rlprof_plugins.report.render.build import build, write_csv, write_json, write_page
from rlprof_plugins.report.execute.on_ray import node
from rlprof_plugins.report.execute.on_ray.node_views import NodeViews
from rlprof_plugins.report.execute.passes import PASSES_DIR, LocalPasses, PlannedPasses
from rlprof_plugins.report.plan.planner import plan_root
from rlprof_plugins.report.plan.view import RootView
from rlprof_plugins.report.render.summary import SUMMARY_PLAN, summarise, summary_of
from rlprof_plugins.store import manifest
from rlprof_plugins.store.step_files import missing_joined
from rlprof_plugins.trace.analysis.trace_stats import TraceStats
from rlprof_plugins.trace.format import naming
from tests.helpers.installed import REPO
from tests.unit.test_fleet_report import FIXTURE, REPLICAS, copy_step, stretch
from tests.unit.test_flight_recorder import dumps, iterate, recorder

FIXTURES = REPO / "tests" / "fixtures"
RANKLESS = FIXTURES / "gpu-published" / "two-ranks-of-128"  # host_pid names: the rank is in the header only
WITH_MANIFEST = FIXTURES / "vllm-0.32-cpu-tp2" / "global_step_3"


@pytest.fixture
def root(tmp_path) -> Path:
    """A root as a node holds it: a step with a manifest (one of its traces a link out of the root), one
    without (ranks in the headers only), a hidden cache folder and a writer's temporary."""
    r = tmp_path / "root"
    shutil.copytree(WITH_MANIFEST, r / "global_step_3", copy_function=shutil.copy2)
    shutil.copytree(RANKLESS, r / "global_step_4", copy_function=shutil.copy2)
    (r / ".rlprof-report-cache").mkdir()
    (r / ".rlprof-report-cache" / "x.rlprof-cache").write_text("{}")
    (r / "global_step_4" / ".manifest.json.123.tmp").write_text("partial")
    linked = next((r / "global_step_3" / "ranks").glob("*rank1*"))
    shutil.move(linked, tmp_path / "secret.trace.json.gz")
    linked.symlink_to(tmp_path / "secret.trace.json.gz")
    return r


def planned(root: Path, **how: object) -> dict:
    return wire.unpack(node.plan_here(str(root), **how))


def merged(root: Path, *nodes: str, **how: object):
    """The view of ROOT as a cluster merges it from ``nodes`` each holding ``root`` (a shared filesystem)."""
    views = NodeViews()
    for name in nodes:
        views.add(name, planned(root, steps=how.get("steps")))
    return views, views.view(str(root), None, how.get("steps"), False)


def test_a_nodes_plan_names_each_pass_carries_no_file_whole_and_reads_nothing_outside_root(root):
    blob = node.plan_here(str(root))
    got = wire.unpack(blob)
    traces = [rel for rel in got["sizes"] if rel.endswith(".gz")]
    assert len(traces) == 1 + 2  # the step's worker rank0 (rank1 leads out of ROOT) and the two rankless ones
    assert not any(rel.startswith(".rlprof-report-cache") for rel in got["sizes"])
    assert any("outside" in line and "rank1" in line for line in got["skipped"])
    assert len(blob) < sum(got["sizes"].values()) / 20  # names and numbers travel, no trace
    (server,) = got["servers"]
    jobs = {str(job.path): job.rank for step in server.planned.values() for job in step.jobs}
    # the manifest-less step's traces placed by the rank their header records, read on the node
    assert sorted(v for k, v in jobs.items() if k.startswith("global_step_4")) == sorted(
        naming.rank_label(naming.trace_rank(p)) for p in RANKLESS.iterdir())
    assert got["version"] and got["exists"]
    with pytest.raises(ValueError, match="outside"):  # and its pass refuses it, whatever a plan says
        node.trace_pass(str(root), next(k for k in jobs if "rank1" in k), "rank1", None, False)


def test_a_nodes_plan_carries_the_step_logs_records_and_the_frontends_periods_rotated_ones_too(root):
    """The step logs travel as their records (measured on the machine that merges every node's ranks), the
    frontends' periods as they were kept, the file a log rotated into included: the numbers a local report
    makes."""
    requests = root / "steps" / "requests"
    requests.mkdir(parents=True)
    period = {"started_at": 1.0, "ended_at": 2.0, "requests": 1, "longest": [
        {"request_id": "r", "arrived_at": 1.0, "finished_at": 2.0, "prompt_tokens": 3, "output_tokens": 4}]}
    line = json.dumps(period) + "\n"
    (requests / "frontend-1.jsonl.1").write_text(line * 1000)
    (requests / "frontend-1.jsonl").write_text(line)
    r = recorder(root, step=5)
    iterate(r, 30)
    r.close()
    local = plan_root(root, use_cache=False).servers[0]
    _, view = merged(root, "node-a", "node-b")
    (server,) = view.servers
    assert len(server.periods) == len(local.periods) == 1001
    assert 5 in server.measured and server.measured[5] == local.measured[5]
    assert server.measured_only == local.measured_only == [5]


def test_a_root_template_is_read_as_each_node_expands_it(root, monkeypatch):
    monkeypatch.setenv("FLEET_NODE_UNDER_TEST", str(root.parent))
    assert planned(Path("$FLEET_NODE_UNDER_TEST") / "root")["root"] == str(root)
    assert planned(root.parent / "none")["exists"] is False


def test_a_server_every_node_holds_alike_is_one_server_and_a_file_that_differs_is_named(root):
    views, view = merged(root, "node-a", "node-b")
    assert len(view.servers) == 1 and all(h == ["node-a", "node-b"] for h in views.holders.values())
    assert views.notes == [n for n in views.notes if "outside" in n]  # the same ROOT: nothing differs
    other = planned(root)
    rel = next(rel for rel in other["sizes"] if rel.startswith("global_step_3/ranks"))
    other["sizes"][rel] += 1  # node-c holds a rank's trace at another size
    views.add("node-c", other)
    assert any(n.startswith(f"{rel}: differs between nodes") and "node-c" in n for n in views.notes)
    assert views.holders[rel] == ["node-a", "node-b"]  # read where it is as the first node holds it


def test_a_plan_not_in_this_releases_shape_is_refused_before_anything_of_it_is_kept(root):
    """A node of another release may send its plan in another shape (servers as plain data): ``add`` says so
    (the cluster names the node in ``faults``) and keeps none of it, not its files' holders either."""
    views = NodeViews()
    other = planned(root)
    other["servers"] = [{"name": s.name, "rel": s.rel} for s in other["servers"]]
    for plan in (other, ["not", "a", "plan"]):
        with pytest.raises(ValueError, match="not in this release's shape"):
            views.add("node-old", plan)
    assert not views.holders and not views.notes
    views.add("node-a", planned(root))
    assert views.holders and all(h == ["node-a"] for h in views.holders.values())


def spanning_two_nodes(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A TP=2 server spanning two nodes, each writing its rank into a step folder of its own disk (the
    manifest's ``nodes``, each worker's node, the roster naming where the other rank lives): node A's ROOT
    (the front end and rank 0), node B's (rank 1), and the same step with both ranks in one folder."""
    whole = tmp_path / "whole"
    shutil.copytree(WITH_MANIFEST, whole / "global_step_3", copy_function=shutil.copy2)
    roots = {"a": tmp_path / "node-a", "b": tmp_path / "node-b"}
    roster = [{"rank": "rank0", "node": 0, "host": "node-a", "directory": str(roots["a"] / "global_step_3")},
              {"rank": "rank1", "node": 1, "host": "node-b", "directory": str(roots["b"] / "global_step_3")}]

    def spanning(data: dict) -> bool:
        data.update(nodes=2, roster=roster)
        data["writers"]["rank1"]["node"] = 1
        return True

    manifest.rewrite(whole / "global_step_3", spanning)
    for node, keep in (("a", {"frontend", "rank0"}), ("b", {"rank1"})):
        folder = roots[node] / "global_step_3"
        shutil.copytree(whole / "global_step_3", folder, copy_function=shutil.copy2)
        data = manifest.rewrite(folder, lambda d: bool(d.update(writers={w: v for w, v in d["writers"].items()
                                                                           if w in keep})) or True)
        listed = {f["path"] for f in data["files"]}
        for trace in folder.rglob("*.pt.trace.json.gz"):
            if str(trace.relative_to(folder)) not in listed:
                trace.unlink()
        assert data["state"] == "done" and len(listed) == len(keep)
    return roots["a"], roots["b"], whole


def test_a_joined_groups_lacking_ranks_are_said_as_of_one_folder():
    """What each node's folder said it lacks, joined: a rank named stays named (with where it lives) unless a
    node holds it; where only a count was known (no rank names to expect), it is counted again."""
    parts = ["rank1 (node 1, host b, /b)", "rank2 (node 2, host c, /c)", "rank0 (node 0, host a, /a)",
             "rank2 (node 2, host c, /c)"]
    assert missing_joined(["rank0", "rank1"], parts) == ["rank2 (node 2, host c, /c)"]
    assert missing_joined(["x", "y"], ["3 of 4 ranks (have x)", "3 of 4 ranks (have y)"]) == [
        "2 of 4 ranks (have x, y)"]
    assert missing_joined(["x", "y"], ["1 of 2 ranks (have x)", "1 of 2 ranks (have y)"]) == []


@pytest.mark.parametrize("order", ["a, b", "b, a"])
def test_a_step_whose_ranks_lie_on_two_nodes_is_read_whole(tmp_path, order):
    """Each node holds its own rank of the step: the merged view reads the step as one folder holding both
    (the report's JSON and the summary equal the local ones over the folder holding both ranks), each
    rank's pass on the node that holds it; with node B not planned, rank 1 is missing and where it lives
    is said."""
    a, b, whole = spanning_two_nodes(tmp_path)
    views = NodeViews()
    for name in order.split(", "):
        views.add(f"node-{name}", planned({"a": a, "b": b}[name]))
    view = views.view(str(whole), None, None, False)
    (step,) = view.servers[0].steps
    assert [(job.rank, views.holders[str(job.path)]) for job in step.jobs] == [("rank0", ["node-a"]),
                                                                              ("rank1", ["node-b"])]
    local = build(plan_root(whole, use_cache=False), LocalPasses(whole, use_cache=False)).to_json()
    assert build(view, nodes_passes(whole, view)).to_json() == local
    (row,) = local["steps"]
    assert row["ranks"] == ["rank0", "rank1"] and not row["missing_ranks"] and row["iterations"] > 0
    summary_views = NodeViews()
    for name in order.split(", "):
        summary_views.add(f"node-{name}", planned({"a": a, "b": b}[name], memory=False, windows=False))
    summary_view = summary_views.view(str(whole), None, None, True)
    assert summary_of(summary_view, nodes_passes(whole, summary_view)) == summarise(whole)

    alone = NodeViews()
    alone.add("node-a", planned(a))
    view = alone.view(str(whole), None, None, False)
    (row,) = build(view, nodes_passes(whole, view)).to_json()["steps"]
    assert row["ranks"] == ["rank0"] and row["missing_ranks"] == [
        f"rank1 (node 1, host node-b, {b / 'global_step_3'})"]


def test_a_pass_is_kept_on_its_node_until_its_file_changes(root):
    rel = next(rel for rel in planned(root)["sizes"] if rel.startswith("global_step_3/ranks"))
    blob, cached, _ = node.trace_pass(str(root), rel, "rank0", None, True)
    stats = wire.unpack(blob)
    assert isinstance(stats, TraceStats) and stats.iterations > 0 and stats.path == Path(rel) and not cached
    again, cached, _ = node.trace_pass(str(root), rel, "rank0", None, True)
    assert cached and again == blob
    path = root / rel
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1))
    assert node.trace_pass(str(root), rel, "rank0", None, True)[1] is False
    assert node.trace_pass(str(root), rel, "rank0", None, False)[1] is False  # --no-cache


def test_a_task_never_reads_outside_root_and_a_blob_holds_nothing_executable(root, tmp_path):
    for rel in ("../secret.txt", str(tmp_path / "secret.txt"), "global_step_3/../../secret.txt"):
        with pytest.raises(ValueError, match="outside"):
            node.trace_pass(str(root), rel, "rank0", None, False)
    evil = zlib.compress(pickle.dumps(os.system))
    with pytest.raises(wire.WireError):  # JSON only: a pickle is no answer, and nothing in it runs
        wire.unpack(evil)
    cache = root / ".rlprof-report-cache" / PASSES_DIR
    rel = next(rel for rel in planned(root)["sizes"] if rel.startswith("global_step_3/ranks"))
    node.trace_pass(str(root), rel, "rank0", None, True)
    entry = next(cache.iterdir())
    head = entry.read_bytes().partition(b"\n")[0]
    entry.write_bytes(head + b"\n" + evil)  # a tampered cache entry counts as absent, and is never run
    blob, cached, _ = node.trace_pass(str(root), rel, "rank0", None, True)
    assert not cached and wire.unpack(blob).iterations > 0


# a ROOT as users name folders: quotes, an ampersand, angle brackets and spaces
AWKWARD = 'it\'s a "fleet" & <all> of it'


def awkward_root(tmp_path: Path) -> Path:
    """verl's layout, three replicas of two steps (real vLLM TP=2 traces), one replica's step 4 manifest-less,
    replica 0's step 3 the slowest, with a flight recorder dump and a memory snapshot beside its traces."""
    root = tmp_path / AWKWARD
    for replica in REPLICAS:
        for step in (3, 4):
            copy_step(FIXTURE, root / replica / f"global_step_{step}", step)
    stretch(root / REPLICAS[0] / "global_step_3", 1.5)
    bare = root / REPLICAS[2] / "global_step_4"
    (bare / "manifest.json").unlink()
    shutil.rmtree(bare / "frontend")
    memory = root / REPLICAS[0] / "global_step_3" / "memory"
    memory.mkdir()
    (memory / "rank0.pickle").write_bytes(pickle.dumps({"segments": [], "device_traces": [[]]}, protocol=4))
    r = recorder(root / REPLICAS[0], step=3)
    iterate(r, 30)
    r.flight_dump("20261127-000000-requested-001")
    dumps(root / REPLICAS[0])
    r.close()
    return root


def nodes_passes(root: Path, view) -> PlannedPasses:
    """The passes ``view`` names run as a node runs them (``node.trace_pass``, ``node.memory_pass``), no cache."""
    traces = {(str(job.path), job.rank, job.stage): wire.unpack(node.trace_pass(str(root), str(job.path), job.rank,
                                                                                job.stage, False)[0])
              for job in view.trace_jobs()}
    memory = {rel: wire.unpack(node.memory_pass(str(root), rel)) for rel in view.memory_files()}
    return PlannedPasses(Analysis("ray"), traces, memory)


class Opened:
    """Every file and folder this process opens or lists below ``root`` while ``watching`` (audit events)."""

    def __init__(self, root: Path) -> None:
        self.root, self.watching, self.seen = str(root), False, []
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple) -> None:
        if self.watching and event in ("open", "os.listdir", "os.scandir") and args and \
                isinstance(args[0], (str, bytes, os.PathLike)) and os.fsdecode(args[0]).startswith(self.root):
            self.seen.append((event, os.fsdecode(args[0])))


class Unwatched(LocalPasses):
    """This machine's passes, their own reads left out of what ``opened`` watches: the executor reads, the
    renderer must not."""

    def __init__(self, root: Path, opened: "Opened") -> None:
        super().__init__(root, use_cache=False)
        self.opened = opened

    def traces(self, jobs, progress):
        self.opened.watching, was = False, self.opened.watching
        try:
            return super().traces(jobs, progress)
        finally:
            self.opened.watching = was

    def memory(self, path):
        self.opened.watching, was = False, self.opened.watching
        try:
            return super().memory(path)
        finally:
            self.opened.watching = was


def test_the_report_over_the_nodes_plans_is_the_local_one_and_its_renderer_opens_no_file(tmp_path):
    root = awkward_root(tmp_path)
    opened = Opened(root)
    local_view, local_summary_view = plan_root(root, use_cache=False), plan_root(root, **SUMMARY_PLAN)
    opened.watching = True
    try:
        local = build(local_view, Unwatched(root, opened))
        local_summary = summary_of(local_summary_view, Unwatched(root, opened))
    finally:
        opened.watching = False
    assert opened.seen == []  # locally too, the renderer read the plan and the passes' results alone
    _, view = merged(root, "node-a")
    assert isinstance(view, RootView) and view.fleet and [s.name for s in view.servers] == REPLICAS
    passes = nodes_passes(root, view)
    assert len(passes.traces_read) == 3 * 2 * 2 + 1 and len(passes.memory_read) == 1  # + the dump's window
    opened.watching = True
    try:
        plan_root(root, use_cache=False)
    finally:
        opened.watching = False
    assert any(event == "open" for event, _ in opened.seen)  # the check sees the planner's reads
    opened.seen.clear()
    views = NodeViews()
    views.add("node-a", planned(root, memory=False, windows=False))
    summary_view = views.view(str(root), None, None, True)
    opened.watching = True
    try:
        on_nodes = build(view, passes)
        summary = summary_of(summary_view, passes)
    finally:
        opened.watching = False
    assert opened.seen == []  # the renderer read the nodes' plans and the passes' results, nothing of ROOT
    assert on_nodes.to_json() == local.to_json()
    assert summary == local_summary == summarise(root)
    assert on_nodes.to_json()["root"] == str(root)
    out = tmp_path / "out"
    out.mkdir()
    for built, name in ((local, "local"), (on_nodes, "nodes")):
        write_json(built, out / f"{name}.json")
        write_page(built, out / f"{name}.html")
        (out / name).mkdir()
        write_csv(built, out / name)
    assert json.loads((out / "nodes.json").read_text()) == json.loads((out / "local.json").read_text())
    assert all((out / "nodes" / p.name).read_text() == p.read_text() for p in (out / "local").iterdir())
    page = (out / "nodes.html").read_text()
    assert "&lt;all&gt;" in page and "<all>" not in page  # ROOT as written, escaped as the page escapes text
    step = next(s for s in on_nodes.to_json()["steps"] if s["global_step"] == 3)
    assert step["replica"] == REPLICAS[0] and step["ranks"] == ["rank0", "rank1"] and step["iterations"] > 0
    assert [a["window_iterations"] for a in step["anomalies"]] == [30]  # the dump's window, read by its pass
    assert "error" not in step["memory"]["rank0"] and step["memory"]["rank0"]["entries"] == 0


def test_a_pass_the_plan_lacks_is_named_unread_never_empty_numbers(tmp_path):
    root = awkward_root(tmp_path)
    _, step_3 = merged(root, "node-a", steps=(3, 3))
    _, view = merged(root, "node-a")
    built = build(view, nodes_passes(root, step_3))  # passes of step 3 alone, for a view of every step
    unread = [n for n in built.notes if "no pass was planned" in n]
    assert unread and all("global_step_4" in n for n in unread)


def test_a_task_failure_says_whether_its_node_went_away_in_one_line():
    """Ray's classes for a node or worker that is gone (the error itself, or the cause a ``RayTaskError``
    carries) mark the pass as one another holder of the file can take; any other error is named by its class
    and its first sentence, with no traceback lines."""
    from rlprof_plugins.report.execute.on_ray.cluster import TaskFailure, why_failed

    class NodeDiedError(Exception):
        pass

    class RayTaskError(Exception):
        def __init__(self, cause):
            super().__init__(str(cause))
            self.cause = cause

    assert why_failed(NodeDiedError("gone")) == TaskFailure("its node died (NodeDiedError)", node_gone=True)
    assert why_failed(RayTaskError(NodeDiedError("gone"))).node_gone
    failure = why_failed(RayTaskError(ValueError("Traceback (most recent call last):\n  File \"x.py\", line 1\n"
                                                 "bad trace. The rest of the message")))
    assert failure == TaskFailure("ValueError: bad trace", node_gone=False)
