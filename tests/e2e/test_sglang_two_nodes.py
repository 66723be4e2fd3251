"""The real SGLang 0.5.23 server spanning two nodes on loopback (TP=2, a scheduler per node).

``--nnodes 2 --node-rank R --dist-init-addr``: node 0 serves HTTP, node 1 runs
its scheduler only. SGLang sends every scheduler the directory its start
request names, so both nodes write the same path (on one machine: one shared
directory). Checked: each rank's node in the status, one manifest that waits
for both nodes, ``rlprof collect`` and a strict merge of both ranks.
"""

import pytest

from rlprof_plugins.store import manifest
from rlprof_plugins.cli.command import main as rlprof
from rlprof_plugins.trace.format.check import check
from tests.helpers.traces import iteration_indices, load_trace, manifest_traces, merged_file


# `make test-extended` (CI's 25 minutes: docs/testing.md). CI runs node folders, collect, merge and the manifests of
# four processes in tests/unit/test_multinode.py, and SGLang's TP=2 server in tests/e2e/test_sglang_server_tp2.py.
pytestmark = pytest.mark.extended

@pytest.fixture(scope="module")
def sglang_two_nodes(tmp_path_factory):
    from tests.helpers.sglang_server import available, start_two_nodes

    if not available():
        pytest.skip(".venv-sglang missing (make env)")
    tmp = tmp_path_factory.mktemp("sglang-two-nodes")
    server = start_two_nodes(tmp, {"torch_profiler_dir": str(tmp / "traces"), "torch_profiler_with_stack": False})
    server.head.trace_dir = tmp / "traces"
    yield server.head
    server.stop()


def test_both_nodes_in_status_manifest_collect_and_merge(sglang_two_nodes, tmp_path):
    head = sglang_two_nodes
    r = head.post("/start_profile", {"global_step": 3, "step_start": 0, "step_end": 4})
    assert r.status_code == 200, r.text
    head.complete(max_tokens=8)
    status = head.wait_state(timeout=120)
    assert status["state"] == "done", status
    assert [(r["rank"], r["node"]) for r in status["ranks"]] == [("TP-0", 0), ("TP-1", 1)]
    assert [(n["node"], n["ranks"]) for n in status["nodes"]] == [(0, ["TP-0"]), (1, ["TP-1"])]
    folder = head.trace_dir / "global_step_3"
    m = manifest.read(folder)
    assert m["state"] == "done" and m["nodes"] == 2 and m["nodes_here"] == [0, 1] and m["elsewhere"] == []

    out = tmp_path / "collected"
    assert rlprof(["collect", "--url", head.url, "--global-step", "3", "-o", str(out)]) == 0
    step = out / "global_step_3"
    assert sorted(manifest_traces(step)) == ["TP-0", "TP-1"]
    assert rlprof(["merge", str(step), "--quiet", "--strict"]) == 0
    report = check(merged_file(step))
    assert report.ok and report.ranks == 2, report.errors
    for path in manifest_traces(step).values():
        assert iteration_indices(load_trace(path)) == [0, 1, 2, 3]
