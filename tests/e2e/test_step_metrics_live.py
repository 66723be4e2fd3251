"""Every RL step measured, the chosen one traced (issue 46), on the real CPU servers.

Each server is configured with ``torch_profiler_dir`` and ``step_source:
weight_version`` only (step metrics are on by default). The trainer's weight
version moves 1..6 through the engine's own route, with traffic after each
of 1..5; only version 3 is traced (a start naming no step: version 3 + the
default offset 1 = global step 4). ``rlprof report ROOT --csv`` then lists
global steps 2..6, each with a ``decode`` row of iterations > 0: step 4 from
its trace, the others from ``steps/<rank>.jsonl`` alone, written by every
rank (TP=2) off the engine thread.
"""

import csv
import json
import time

import pytest

from rlprof_plugins.cli.command import main as rlprof
from tests.helpers import sglang_server
from tests.helpers.vllm_server import start_server

CONFIG = {"torch_profiler_with_stack": False, "step_source": "weight_version"}


def set_version(server, version: int) -> None:
    r = server.post("/update_weight_version", {"new_version": str(version)})
    assert r.status_code == 200, r.text


def drive(server, root) -> dict:
    """Versions 1..6, traffic after 1..5, version 3 traced; the report's rows by global step."""
    for version in range(1, 7):
        set_version(server, version)
        if version == 6:
            break
        if version == 3:
            start = server.post("/start_profile", {"num_steps": 4} if server.name == "SGLang" else {})
            assert start.status_code == 200 and start.json().get("global_step") == 4, start.text
        for _ in range(2):
            server.complete(max_tokens=6)
        if version == 3:
            if server.name != "SGLang":
                assert server.post("/stop_profile", {}).status_code == 200
            assert server.wait_state()["state"] == "done"
    deadline = time.time() + 30  # the last step's records are written off the engine thread
    while time.time() < deadline:
        lines = [line for p in (root / "steps").glob("*.jsonl") for line in p.read_text().splitlines()]
        if sum(1 for line in lines if json.loads(line)["global_step"] == 6) >= 2:
            break
        time.sleep(0.5)
    out = root.parent / "csv"
    assert rlprof(["report", str(root), "-q", "--csv", str(out), "-o", str(root.parent / "report.html")]) == 0
    rows = list(csv.DictReader((out / "steps.csv").open()))
    return {int(r["global_step"]): r for r in rows if r["stage"] == "decode"}


def check(rows: dict, root, ranks: int) -> None:
    assert sorted(rows) == [2, 3, 4, 5, 6], sorted(rows)
    assert all(int(r["iterations"]) > 0 for r in rows.values()), rows
    assert int(rows[4]["ranks"]) == ranks and rows[4]["state"] == "done"  # the traced one, from its trace
    assert {rows[s]["state"] for s in (2, 3, 5, 6)} == {"measured"}
    files = sorted(p.name for p in (root / "steps").glob("*.jsonl"))
    assert len(files) == ranks, files
    for path in (root / "steps").glob("*.jsonl"):
        steps = [json.loads(line)["global_step"] for line in path.read_text().splitlines()]
        assert {2, 3, 4, 5, 6} <= set(steps), (path.name, steps)


@pytest.mark.vllm
def test_vllm_measures_every_weight_version_and_traces_one(tmp_path):
    root = tmp_path / "traces"
    server = start_server(tmp_path, {"profiler": "torch", "torch_profiler_dir": str(root), **CONFIG}, tp=2,
                          env={"VLLM_SERVER_DEV_MODE": "1"})
    server.name = "vLLM"
    try:
        check(drive(server, root), root, ranks=2)
    finally:
        server.stop()


def test_sglang_measures_every_weight_version_and_traces_one(tmp_path):
    if not sglang_server.available():
        pytest.skip("SGLang environment (.venv-sglang) not built: make env")
    root = tmp_path / "traces"
    server = sglang_server.start_server(tmp_path, {"torch_profiler_dir": str(root), **CONFIG}, tp=2)
    server.name = "SGLang"
    try:
        check(drive(server, root), root, ranks=2)
    finally:
        server.stop()
