"""The parts of ``rlprof report --ray`` that run without a cluster (issue 70): each node's listing, the
listed root made of listings (``store.listing``), the report planned, executed and rendered over it (the
local report's JSON, no file opened by the renderer), the pass with its cache, what a blob may hold, and
a task's failure in one line.

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

from rlprof_plugins.report import wire
from rlprof_plugins.report.analysis import Analysis
from rlprof_plugins.report.build import build, write_csv, write_json, write_page
from rlprof_plugins.report.on_ray import node
from rlprof_plugins.report.passes import PASSES_DIR, PlannedPasses
from rlprof_plugins.report.plan import plan_passes
from rlprof_plugins.report.summary import summarise
from rlprof_plugins.store.listing import Listing, ListedPath, NotCarried
from rlprof_plugins.trace.analysis.trace_stats import TraceStats
from rlprof_plugins.trace.format import naming
from rlprof_plugins.store.step_files import plan
from tests.helpers.installed import REPO
from tests.unit.test_fleet_report import FIXTURE, REPLICAS, copy_step, stretch
from tests.unit.test_flight_recorder import dumps, iterate, recorder

FIXTURES = REPO / "tests" / "fixtures"
RANKLESS = FIXTURES / "gpu-published" / "two-ranks-of-128"  # host_pid names: the rank is in the header only
WITH_MANIFEST = FIXTURES / "vllm-0.32-cpu-tp2" / "global_step_3"


@pytest.fixture
def root(tmp_path) -> Path:
    """A root as a node holds it: a step with a manifest, one without (ranks in the headers only), a hidden
    cache folder, a writer's temporary, and a link out of the root."""
    r = tmp_path / "root"
    shutil.copytree(WITH_MANIFEST, r / "global_step_3", copy_function=shutil.copy2)
    shutil.copytree(RANKLESS, r / "global_step_4", copy_function=shutil.copy2)
    (r / ".rlprof-report-cache").mkdir()
    (r / ".rlprof-report-cache" / "x.rlprof-cache").write_text("{}")
    (r / "global_step_4" / ".manifest.json.123.tmp").write_text("partial")
    (tmp_path / "secret.txt").write_text("not below ROOT")
    (r / "global_step_4" / "link.txt").symlink_to(tmp_path / "secret.txt")
    return r


def listed(root: Path) -> dict:
    return wire.unpack(node.listing(str(root)))


def test_a_listing_names_every_file_carries_small_ones_whole_and_reads_nothing_outside_root(root):
    got = listed(root)
    names = {rel: kind for rel, _, _, kind in got["files"]}
    assert names["global_step_3/manifest.json"] == "file"
    assert sum(1 for k in names.values() if k == "trace") == 3 + 2
    assert not any(rel.startswith(".rlprof-report-cache") or rel.endswith(".tmp") for rel in names)
    assert "global_step_4/link.txt" not in names and any("link.txt" in s for s in got["skipped"])
    assert got["contents"]["global_step_3/manifest.json"] == (root / "global_step_3" / "manifest.json").read_bytes()
    assert not any(k.endswith(".gz") for k in got["contents"])  # a trace travels only as its pass's summary
    # the manifest-less step's traces carry what places them: the rank and world size of their header
    assert got["distributed"] == {f"global_step_4/{p.name}": {"rank": naming.trace_rank(p), "world_size": 128}
                                  for p in RANKLESS.iterdir()}
    assert got["version"] and got["exists"]


def test_a_listing_carries_line_logs_whole_however_large_rotated_ones_too(root):
    """The step logs and the frontends' requests are read by the report itself, not by a pass: on Ray they must
    travel whole as they are read locally, the file a log rotated into included."""
    from rlprof_plugins.step_logs.requests import read_periods

    requests = root / "steps" / "requests"
    requests.mkdir(parents=True)
    period = {"started_at": 1.0, "ended_at": 2.0, "requests": 1, "longest": [
        {"request_id": "r", "arrived_at": 1.0, "finished_at": 2.0, "prompt_tokens": 3, "output_tokens": 4}]}
    line = json.dumps(period) + "\n"
    (requests / "frontend-1.jsonl.1").write_text(line * (node.SMALL // len(line) + 1))  # over SMALL
    (requests / "frontend-1.jsonl").write_text(line)
    got = listed(root)
    assert (requests / "frontend-1.jsonl.1").stat().st_size > node.SMALL
    assert set(got["contents"]) >= {"steps/requests/frontend-1.jsonl.1", "steps/requests/frontend-1.jsonl"}
    listing = Listing(str(root))
    listing.add("node-a", got)
    assert len(read_periods(listing.root)) == len(read_periods(root)) == node.SMALL // len(line) + 2


def test_a_flight_recorders_window_travels_by_name_and_a_large_json_file_not_whole(root):
    """Only what the report reads itself travels whole: a dump's ``anomaly.json``, not its ranks' windows
    (up to the recorder's ``disk_mb``: a pass reads each on its node), and no other file above ``SMALL``."""
    from rlprof_plugins.metrics.flight_dump import ANOMALY_FILE, TRACE_SUFFIX

    dump = root / "global_step_3" / "flight" / "20261127-000000-requested-001"
    dump.mkdir(parents=True)
    (dump / ANOMALY_FILE).write_text(json.dumps({"reason": "requested"}))
    (dump / f"rank0{TRACE_SUFFIX}").write_text(json.dumps({"traceEvents": []}))  # small, yet its pass's
    (root / "global_step_3" / "large.json").write_text(json.dumps({"x": "y" * node.SMALL}))
    got = listed(root)
    kinds = {rel: kind for rel, _, _, kind in got["files"]}
    window, anomaly = f"{dump.relative_to(root)}/rank0{TRACE_SUFFIX}", f"{dump.relative_to(root)}/{ANOMALY_FILE}"
    assert (kinds[window], kinds[anomaly], kinds["global_step_3/large.json"]) == ("window", "file", "file")
    assert anomaly in got["contents"]
    assert window not in got["contents"] and "global_step_3/large.json" not in got["contents"]


def test_a_root_template_is_read_as_each_node_expands_it(root, monkeypatch):
    monkeypatch.setenv("FLEET_NODE_UNDER_TEST", str(root.parent))
    assert listed(Path("$FLEET_NODE_UNDER_TEST") / "root")["root"] == str(root)
    assert listed(root.parent / "none")["exists"] is False


def test_a_listed_root_plans_as_the_real_one_and_never_reads_this_machines_disk(root):
    listing = Listing(str(root))
    listing.add("node-a", listed(root))
    for step in ("global_step_3", "global_step_4"):
        real, from_listing = plan(root / step), plan(listing.root / step)
        assert [(g.stage, [(rf.label, rf.path.name) for rf in g.inputs], g.missing) for g in from_listing.groups] == \
               [(g.stage, [(rf.label, rf.path.name) for rf in g.inputs], g.missing) for g in real.groups]
        assert from_listing.assumed == real.assumed
        assert all(isinstance(rf.path, ListedPath) and str(rf.path).startswith(str(root))
                   for g in from_listing.groups for rf in g.inputs)
    trace = next(p for p in (listing.root / "global_step_3" / "ranks").iterdir() if p.name.endswith(".gz"))
    assert trace.stat().st_size == (root / trace.relative_to(listing.root)).stat().st_size
    with pytest.raises(NotCarried):  # a trace is read only by its pass, where it lies
        trace.read_bytes()
    with pytest.raises(TypeError):  # no __fspath__: nothing hands a listed path to this machine's open()
        open(trace, "rb")
    with pytest.raises(ValueError):
        listing.root / ".." / "secret.txt"


def test_a_file_every_node_lists_alike_is_one_file_and_a_differing_one_is_named(root):
    listing = Listing(str(root))
    listing.add("node-a", listed(root))
    listing.add("node-b", listed(root))
    assert all(held.nodes == ["node-a", "node-b"] for held in listing.files.values())
    changed = root / "global_step_3" / "manifest.json"
    os.utime(changed, ns=(changed.stat().st_atime_ns, changed.stat().st_mtime_ns + 10**9))
    listing.add("node-c", listed(root))
    assert listing.files["global_step_3/manifest.json"].nodes == ["node-c"]
    assert len(listing.conflicts) == 1 and "node-c" in listing.conflicts[0] and "manifest.json" in listing.conflicts[0]


def test_a_pass_is_kept_on_its_node_until_its_file_changes(root):
    rel = next(rel for rel, _, _, kind in listed(root)["files"] if kind == "trace" and "ranks" in rel)
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
    rel = "global_step_3/ranks/" + next((root / "global_step_3" / "ranks").iterdir()).name
    node.trace_pass(str(root), rel, "rank0", None, True)
    entry = next(cache.iterdir())
    head = entry.read_bytes().partition(b"\n")[0]
    entry.write_bytes(head + b"\n" + evil)  # a tampered cache entry counts as absent, and is never run
    blob, cached, _ = node.trace_pass(str(root), rel, "rank0", None, True)
    assert not cached and wire.unpack(blob).iterations > 0


def test_a_listed_path_that_leads_out_of_root_is_refused_and_named():
    listing = Listing("/nodes/root")
    listing.add("node-a", {"files": [["../../etc/evil", 3, 1, "file"], ["/abs/evil", 3, 1, "file"],
                                     ["global_step_1/ok.json", 2, 1, "file"]],
                           "contents": {"../../etc/evil": b"bad", "/abs/evil": b"bad", "global_step_1/ok.json": b"{}"}})
    assert list(listing.files) == ["global_step_1/ok.json"]
    assert len(listing.conflicts) == 2 and all("leads out of ROOT" in c for c in listing.conflicts)
    assert [str(p) for p in listing.root.iterdir()] == ["/nodes/root/global_step_1"]
    assert (listing.root / "global_step_1" / "ok.json").read_text() == "{}"


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


def nodes_passes(root: Path, listing: Listing, **plan: object) -> PlannedPasses:
    """The planned passes run as a node runs them (``node.trace_pass``, ``node.memory_pass``), no cache."""
    planned = plan_passes(listing.root, **plan)
    traces = {(job.path.rel, job.rank, job.stage): wire.unpack(node.trace_pass(str(root), job.path.rel, job.rank,
                                                                               job.stage, False)[0])
              for job in planned.traces}
    memory = {path.rel: wire.unpack(node.memory_pass(str(root), path.rel)) for path in planned.memory}
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


def test_the_report_over_the_nodes_listings_is_the_local_one_and_its_renderer_opens_no_file(tmp_path):
    root = awkward_root(tmp_path)
    local = build(root, use_cache=False)
    listing = Listing(str(root))
    listing.add("node-a", listed(root))
    assert listing.contents
    passes = nodes_passes(root, listing)
    assert len(passes.traces_read) == 3 * 2 * 2 + 1 and len(passes.memory_read) == 1  # + the dump's window
    opened = Opened(root)
    opened.watching = True
    try:
        build(root, use_cache=False)
    finally:
        opened.watching = False
    assert any(event == "open" for event, _ in opened.seen)  # the check sees a local report's reads
    opened.seen.clear()
    opened.watching = True
    try:
        on_nodes = build(listing.root, passes=passes)
        summary = summarise(listing.root, passes=passes)
    finally:
        opened.watching = False
    assert opened.seen == []  # the renderer read the listing and the passes' results, nothing of ROOT
    assert on_nodes.to_json() == local.to_json()
    assert summary == summarise(root)
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
    listing = Listing(str(root))
    listing.add("node-a", listed(root))
    passes = nodes_passes(root, listing, steps=(3, 3))  # a plan of step 3 alone
    built = build(listing.root, passes=passes)
    unread = [n for n in built.notes if "no pass was planned" in n]
    assert unread and all("global_step_4" in n for n in unread)


def test_a_task_failure_says_whether_its_node_went_away_in_one_line():
    """Ray's classes for a node or worker that is gone (the error itself, or the cause a ``RayTaskError``
    carries) mark the pass as one another holder of the file can take; any other error is named by its class
    and its first sentence, with no traceback lines."""
    from rlprof_plugins.report.on_ray.failures import TaskFailure, why_failed

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
