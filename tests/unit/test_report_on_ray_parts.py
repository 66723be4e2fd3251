"""The parts of ``rlprof report --ray`` that run without a cluster (issue 70): each node's listing, the
stand-in root laid out from listings, the pass with its node cache, and what a blob may hold.

The cluster itself (Ray's nodes, node affinity, a node killed, a node without rlprof) is
tests/ray/test_report_on_ray.py.
"""

from __future__ import annotations

import os
import pickle
import shutil
import zlib
from pathlib import Path

import pytest

from rlprof_plugins.report.on_ray import node, wire
from rlprof_plugins.report.on_ray.mirror import Tree
from rlprof_plugins.trace.analysis.trace_stats import TraceStats, trace_stats
from rlprof_plugins.trace.format import naming
from rlprof_plugins.store.step_files import plan
from tests.helpers.installed import REPO

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


def test_a_root_template_is_read_as_each_node_expands_it(root, monkeypatch):
    monkeypatch.setenv("FLEET_NODE_UNDER_TEST", str(root.parent))
    assert listed(Path("$FLEET_NODE_UNDER_TEST") / "root")["root"] == str(root)
    assert listed(root.parent / "none")["exists"] is False


def test_the_stand_in_root_plans_as_the_real_one_with_no_trace_event_in_it(root, tmp_path):
    tree = Tree()
    tree.add("node-a", listed(root))
    mirror = tmp_path / "mirror"
    tree.lay_out(mirror)
    for step in ("global_step_3", "global_step_4"):
        real, stand_in = plan(root / step), plan(mirror / step)
        assert [(g.stage, [(rf.label, rf.path.name) for rf in g.inputs], g.missing) for g in stand_in.groups] == \
               [(g.stage, [(rf.label, rf.path.name) for rf in g.inputs], g.missing) for g in real.groups]
        assert stand_in.assumed == real.assumed
    for rel, held in tree.files.items():
        st = os.stat(mirror / rel)
        assert (st.st_size, st.st_mtime_ns) == (held.size, held.mtime_ns)
        if held.kind == "trace":
            assert os.stat(mirror / rel).st_blocks * 512 < max(held.size, 1 << 16)  # sparse
            assert trace_stats(mirror / rel, "rank0", None).iterations == 0  # no event of the real one


def test_a_file_every_node_lists_alike_is_one_file_and_a_differing_one_is_named(root):
    tree = Tree()
    tree.add("node-a", listed(root))
    tree.add("node-b", listed(root))
    assert all(held.nodes == ["node-a", "node-b"] for held in tree.files.values())
    changed = root / "global_step_3" / "manifest.json"
    os.utime(changed, ns=(changed.stat().st_atime_ns, changed.stat().st_mtime_ns + 10**9))
    tree.add("node-c", listed(root))
    assert tree.files["global_step_3/manifest.json"].nodes == ["node-c"]
    assert len(tree.conflicts) == 1 and "node-c" in tree.conflicts[0] and "manifest.json" in tree.conflicts[0]


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
    cache = root / ".rlprof-report-cache" / node.PASSES_DIR
    rel = "global_step_3/ranks/" + next((root / "global_step_3" / "ranks").iterdir()).name
    node.trace_pass(str(root), rel, "rank0", None, True)
    entry = next(cache.iterdir())
    head = entry.read_bytes().partition(b"\n")[0]
    entry.write_bytes(head + b"\n" + evil)  # a tampered cache entry counts as absent, and is never run
    blob, cached, _ = node.trace_pass(str(root), rel, "rank0", None, True)
    assert not cached and wire.unpack(blob).iterations > 0


def test_a_listed_path_that_leads_out_of_the_stand_in_tree_is_refused_and_named(tmp_path):
    tree = Tree()
    tree.add("node-a", {"files": [["../../etc/evil", 3, 1, "file"], ["/abs/evil", 3, 1, "file"],
                                  ["global_step_1/ok.json", 2, 1, "file"]],
                        "contents": {"../../etc/evil": b"bad", "/abs/evil": b"bad", "global_step_1/ok.json": b"{}"}})
    assert list(tree.files) == ["global_step_1/ok.json"]
    assert len(tree.conflicts) == 2 and all("leads out of ROOT" in c for c in tree.conflicts)
    base = tmp_path / "stand-in"
    base.mkdir()
    tree.lay_out(base)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()) == [
        "stand-in/global_step_1/ok.json"]


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
