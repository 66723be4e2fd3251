"""A vLLM server spanning two nodes (TP=2, one rank per node), on loopback.

Node 0 (the head, with the HTTP server) and a headless node 1 are started
with ``vllm serve --nnodes 2 --node-rank R`` (tests/tools/vllm_serve.py), each
with its own trace directory, as with node-local disks; then one step goes to
a directory both are allowed to write (a shared mount). What a trainer sees:
the status of every rank with its host and folder, each node's manifest true
for its own ranks and naming the other's, ``rlprof collect`` gathering the
step through the head's HTTP server (node 1's files read by its own worker),
and ``rlprof merge`` making one checked trace of both ranks.
"""

import json
import time

import pytest

from rlprof_plugins.store import manifest
from rlprof_plugins.cli.command import main as rlprof
from rlprof_plugins.trace.format.check import check
from tests.helpers.traces import iteration_indices, load_trace, merged_file, rank_traces
from tests.helpers.vllm_server import start_two_nodes

# `make test-extended` (CI's 25 minutes: docs/testing.md): in CI, a server spanning two nodes runs on SGLang
# (tests/e2e/test_sglang_two_nodes.py) and collect/merge of node folders in tests/unit/test_multinode.py
pytestmark = [pytest.mark.vllm, pytest.mark.extended]


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("two-nodes")
    shared = tmp / "shared"
    # No Python stacks, as in the other server tests: Kineto writes some Python frame names
    # unescaped (`..._node_metadata_hook.py(0): "cuda.version"`), which makes the JSON invalid.
    configs = tuple({"profiler": "torch", "torch_profiler_dir": str(tmp / f"node{n}"), "torch_profiler_with_stack": False,
                     "allowed_output_dirs": [str(shared)]} for n in (0, 1))
    server = start_two_nodes(tmp, configs)
    server.head.shared = shared
    yield server
    server.stop()


def profile(head, step: int, **body) -> dict:
    r = head.post("/start_profile", {"global_step": step, "step_start": 0, "step_end": 4, **body})
    assert r.status_code == 200, r.text
    head.complete(max_tokens=8)
    status = head.wait_state(timeout=120)
    assert status["state"] == "done", status
    return status


def test_node_local_folders_are_true_and_collect_merges_both_ranks(two_nodes, tmp_path):
    head = two_nodes.head
    status = profile(head, 3)
    folders = {n: head.trace_dir.parent / f"node{n}" / "global_step_3" for n in (0, 1)}
    assert [(r["rank"], r["node"], r["directory"]) for r in status["ranks"]] == [
        ("rank0", 0, str(folders[0])), ("rank1", 1, str(folders[1]))]
    assert [(n["node"], n["ranks"], n["state"]) for n in status["nodes"]] == [(0, ["rank0"], "done"),
                                                                              (1, ["rank1"], "done")]
    assert all(r["host"] for r in status["ranks"])
    for node, other in ((0, 1), (1, 0)):  # each node's manifest: done with its own rank, naming the other's
        m = manifest.read(folders[node])
        assert m["state"] == "done" and m["nodes"] == 2 and m["nodes_here"] == [node], m
        assert sorted(w for w, s in m["writers"].items() if s["role"] == "worker") == [f"rank{node}"]
        assert [(e["node"], e["ranks"], e["directory"]) for e in m["elsewhere"]] == [
            (other, [f"rank{other}"], str(folders[other]))]
    assert sorted(rank_traces(folders[1])) == ["rank1"]

    # one node's folder alone: the merge names the rank that is elsewhere
    assert rlprof(["merge", str(folders[0]), "--quiet", "--strict", "-o", str(tmp_path / "half.json.gz")]) == 1

    # step 3's metrics finished on both nodes (a mark moves every rank to step 4), to be collected too
    assert head.post("/profile_step", {"global_step": 4}).json()["status"] == "marked"
    node_steps = {rank: head.trace_dir.parent / f"node{rank[-1]}" / "steps" / f"{rank}.jsonl"
                  for rank in ("rank0", "rank1")}
    deadline = time.time() + 30
    while not all(p.exists() for p in node_steps.values()) and time.time() < deadline:
        time.sleep(0.2)

    # gathered through the head's HTTP server, then merged
    out = tmp_path / "collected"
    assert rlprof(["collect", "--url", head.url, "--global-step", "3", "-o", str(out)]) == 0
    step = out / "global_step_3"
    m = manifest.read(step)
    assert m["state"] == "done" and m["nodes_here"] == [0, 1] and m["elsewhere"] == []
    traces = rank_traces(step)
    assert sorted(traces) == ["rank0", "rank1"]
    for rank in ("rank0", "rank1"):  # byte for byte what each node wrote
        assert traces[rank].read_bytes() == next(folders[int(rank[-1])].rglob(traces[rank].name)).read_bytes()
    assert rlprof(["merge", str(step), "--quiet", "--strict"]) == 0
    for rank, node_file in node_steps.items():  # each rank's step metrics, from its own node, byte for byte
        collected = (out / "steps" / f"{rank}.jsonl").read_bytes()
        assert collected == node_file.read_bytes() and b'"global_step":3' in collected, rank
    merged = merged_file(step)
    report = check(merged)
    assert report.ok and report.ranks >= 2, report.errors
    trace = load_trace(merged)
    assert [r["label"] for r in trace["rlprof_merge"]["ranks"]] == ["rank0", "rank1", "frontend"]
    assert trace["rlprof_merge"]["missing"] == []
    for rank in ("rank0", "rank1"):
        assert iteration_indices(load_trace(traces[rank])) == [0, 1, 2, 3]


def test_a_file_route_refuses_what_no_rank_wrote(two_nodes):
    head = two_nodes.head
    profile(head, 5)
    r = head.get("/profile_file?global_step=5&rank=rank1&path=../../etc/passwd")
    assert r.status_code == 404 and r.json()["error"]["field"] == "path"
    r = head.get("/profile_file?global_step=5&rank=rank7&path=manifest.json")
    assert r.status_code == 404 and r.json()["error"]["field"] == "rank"
    r = head.get("/profile_file?global_step=5&rank=rank1")
    assert r.status_code == 400 and r.json()["error"]["field"] == "path"
    r = head.get("/profile_file?global_step=5&rank=rank1&path=manifest.json")
    assert r.status_code == 200 and json.loads(r.content)["writers"]["rank1"]["node"] == 1


def test_a_shared_directory_holds_one_manifest_for_both_nodes(two_nodes):
    head = two_nodes.head
    status = profile(head, 4, output_dir=str(head.shared))
    folder = head.shared / "global_step_4"
    assert {r["directory"] for r in status["ranks"]} == {str(folder)}
    assert len(status["nodes"]) == 2  # one folder, two nodes
    m = manifest.read(folder)
    assert m["state"] == "done" and m["nodes_here"] == [0, 1] and m["elsewhere"] == []
    assert sorted(w for w, s in m["writers"].items() if s["role"] == "worker") == ["rank0", "rank1"]
    assert sorted(rank_traces(folder)) == ["rank0", "rank1"]
