"""vLLM's data parallelism on a live server: two engines, each numbering its one worker rank 0, kept apart.

``vllm serve --data-parallel-size 2`` (vLLM 0.32 on CPU runs it: two engine processes behind one API
server, each with one worker). A trainer marks RL steps 1..3 with traffic in each and traces step 2, as
verl's replay does. Every name a worker writes under carries its data-parallel rank: two step logs
(``rank0`` and ``dp1-rank0``), two worker sections in the step's manifest, two rank traces in ``ranks/``
whose names say which engine wrote them, two flight recorder traces in one requested dump; the status
answers for both engines' ranks (vLLM's client hands back the first engine's answer alone), and ``rlprof
report`` reads the two as ranks of one server.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from rlprof_plugins.cli.command import main as rlprof
from tests.helpers.vllm_server import start_server

RANKS = ["dp1-rank0", "rank0"]


@pytest.fixture(scope="module")
def data_parallel(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vllm-dp2")
    root = tmp / "traces"
    server = start_server(tmp, {"profiler": "torch", "torch_profiler_dir": str(root), "torch_profiler_with_stack": False},
                          extra=["--data-parallel-size", "2"], env={"VLLM_CPU_OMP_THREADS_BIND": "0|1"}, timeout=400)
    try:
        statuses = {}
        for step in (1, 2, 3):
            r = server.post("/profile_step", {"global_step": step})
            assert r.status_code == 200, r.text
            if step == 2:
                r = server.post("/start_profile", {"global_step": 2})
                assert r.status_code == 200, r.text
            for _ in range(4):  # vLLM balances requests over its engines: both run some
                server.complete(max_tokens=4)
            if step == 2:
                assert server.post("/stop_profile", {}).status_code == 200
                statuses[2] = server.wait_state()
        assert server.post("/profile_step", {"global_step": 4}).status_code == 200  # step 3's numbers written
        r = server.post("/rlprof/flight_dump", {})
        assert r.status_code == 200, r.text
        deadline = time.time() + 60  # step 3's records and the dump are written off the engine thread
        while time.time() < deadline and not (
                all((root / "steps" / f"{rank}.jsonl").exists() and '"global_step":3' in
                    (root / "steps" / f"{rank}.jsonl").read_text() for rank in RANKS)
                and len(list(root.rglob("*.flight.json"))) >= 2):
            time.sleep(0.3)
        yield root, statuses, server
    finally:
        server.stop()


def test_every_name_a_worker_writes_under_carries_its_data_parallel_rank(data_parallel):
    root, statuses, server = data_parallel
    assert sorted(p.name.removesuffix(".jsonl") for p in (root / "steps").glob("*.jsonl")) == RANKS
    for rank in RANKS:  # each log holds its own rank's lines, every step once
        records = [json.loads(line) for line in (root / "steps" / f"{rank}.jsonl").read_text().splitlines()]
        assert {r["rank"] for r in records} == {rank}
        assert [r["global_step"] for r in records] == [1, 2, 3], records
    step = root / "global_step_2"
    manifest = json.loads((step / "manifest.json").read_text())
    workers = {w: s for w, s in manifest["writers"].items() if s.get("role") == "worker"}
    assert sorted(workers) == RANKS and manifest["state"] == "done"
    assert manifest["expected_ranks"] == 2
    traces = sorted(p.name for p in (step / "ranks").iterdir())
    assert len(traces) == 2 and sum(t.startswith("dp1_") for t in traces) == 1, traces
    listed = {f["path"] for s in workers.values() for f in s["files"]}
    assert listed == {f"ranks/{t}" for t in traces}
    assert sorted(r["rank"] for r in statuses[2]["ranks"]) == RANKS
    dumps = sorted(p.name for p in root.rglob("*.flight.json"))
    assert dumps == [f"{rank}.flight.json" for rank in RANKS], dumps


def test_the_report_reads_the_engines_as_ranks_of_one_server(data_parallel, tmp_path):
    root, statuses, server = data_parallel
    out = tmp_path / "report.json"
    assert rlprof(["report", str(root), "-q", "--no-cache", "--json", str(out), "-o", str(tmp_path / "r.html")]) == 0
    data = json.loads(out.read_text())
    by_step = {s["global_step"]: s for s in data["steps"]}
    assert {1, 2, 3} <= set(by_step)
    assert by_step[2]["traced"]
    text = json.dumps(by_step[2])
    assert "dp1-rank0" in text and "rank0" in text
