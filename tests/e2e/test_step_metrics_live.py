"""Every RL step measured, the chosen one traced (issue 46), on the real CPU servers.

Each server is configured with ``torch_profiler_dir`` and ``step_source:
weight_version`` only (step metrics are on by default). The trainer's weight
version moves 1..6 through the engine's own route, with traffic after each
of 1..5; only version 3 is traced (a start naming no step: version 3 + the
default offset 1 = global step 4). ``rlprof report ROOT --csv`` then lists
global steps 2..6, each with a ``decode`` row of iterations > 0: step 4 from
its trace, the others from ``steps/<rank>.jsonl`` alone, written by every
rank (TP=2) off the engine thread. The engine's own ``/metrics`` (vLLM always,
SGLang with ``--enable-metrics``) carries rlprof's series, and a real
Prometheus scraping it answers ``rlprof_global_step`` with 6 on each rank (the
newest step finished: version 6 ended step 6), ``rlprof_current_step`` with 7,
and every query of the Grafana dashboard with data (a requested flight recorder dump first, ``rlprof
dump``: one folder, a trace per rank, so the anomalies panel has its series; a cache reset after version
2's traffic, an RL phase on every rank, so the phases panel has its series).
Then the trainer marks steps itself (``RolloutProfiler.mark_step``, ``rlprof
step``), as one that versions nothing would.
"""

import csv
import json
import time
from pathlib import Path

import pytest

from rlprof_plugins.cli.command import main as rlprof
from rlprof_plugins.client import RolloutProfiler
from tests.helpers import sglang_server
from tests.helpers.prometheus import Prometheus
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
        if version == 2:  # a trainer's cache reset between rollouts: an RL phase (the dashboard's phases panel)
            reset = server.post("/flush_cache" if server.name == "SGLang" else "/reset_prefix_cache", {})
            assert reset.status_code == 200, reset.text
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


DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "rlprof-steps.json"


def dashboard_queries() -> list[tuple[str, str]]:
    """Each panel's query, Grafana's ``$__rate_interval`` as a window a 1 s scrape fills."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [(p["title"], t["expr"].replace("$__rate_interval", "15s")) for p in panels for t in p["targets"]]


def scraped(server, tmp_path, ranks: int) -> None:
    """The engine's /metrics, scraped by a real Prometheus, queried as a dashboard does."""
    text = server.get("/metrics").text
    assert "rlprof_global_step{" in text and "rlprof_iteration_seconds_bucket{" in text, text[-2000:]
    prometheus = Prometheus(tmp_path / "prometheus", server.url.removeprefix("http://"))
    try:
        steps = prometheus.wait_for("rlprof_global_step")  # version 6 finished step 6 (5 + the offset 1)
        assert len(steps) == ranks and {float(r["value"][1]) for r in steps} == {6.0}, steps
        current = prometheus.wait_for("rlprof_current_step")  # and iterations now count for step 7
        assert {float(r["value"][1]) for r in current} == {7.0}, current
        decode = prometheus.wait_for('sum(rlprof_iteration_seconds_count{stage="decode"})')
        assert float(decode[0]["value"][1]) > 0
        resets = prometheus.wait_for('rlprof_rl_phases_total{phase="cache_reset"}')  # one on every rank
        assert len(resets) == ranks and {float(r["value"][1]) for r in resets} == {1.0}, resets
        for title, expression in dashboard_queries():  # every panel of docs/grafana/rlprof-steps.json has data
            assert prometheus.wait_for(expression), title
    finally:
        prometheus.stop()


def dumped(server, root, ranks: int) -> None:
    """A requested flight recorder dump (``rlprof dump``): one folder below the current step (7), a trace per
    rank, counted on /metrics (the dashboard's anomalies panel then has data)."""
    from rlprof_plugins.step_logs.anomalies import read_anomalies

    assert rlprof(["dump", "--url", server.url]) == 0
    deadline = time.time() + 10
    while not (found := read_anomalies(root / "global_step_7")) and time.time() < deadline:
        time.sleep(0.1)
    while found and len(found[0].get("ranks", {})) < ranks and time.time() < deadline:
        time.sleep(0.1)
        found = read_anomalies(root / "global_step_7")
    assert len(found) == 1 and found[0]["reason"] == "requested" and len(found[0]["ranks"]) == ranks, found
    assert len(list(Path(found[0]["path"]).glob("*.flight.json"))) == ranks


def marked(server, root, ranks: int) -> None:
    """A trainer that versions nothing marks its steps (the client and ``rlprof step``); bad input is a 400."""
    bad = server.post("/profile_step", {"global_step": "x"})
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "global_step", bad.text
    result = RolloutProfiler([server.url]).mark_step(20)
    assert result.ok, result
    for _ in range(2):
        server.complete(max_tokens=4)
    assert rlprof(["step", "21", "--url", server.url]) == 0  # step 20 is finished
    deadline = time.time() + 30
    while time.time() < deadline:
        found = [json.loads(line) for p in (root / "steps").glob("*.jsonl") for line in p.read_text().splitlines()]
        twenty = [r for r in found if r["global_step"] == 20]
        if len(twenty) >= ranks:
            break
        time.sleep(0.5)
    assert len(twenty) == ranks and all(r["step_source"] == "mark_step" and r["iterations"] > 0 for r in twenty)


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


# `make test-extended` (CI's 25 minutes: docs/testing.md), and SGLang's below: in CI, the step logs of both TP=1
# servers (steps measured, a slow step and a rollout's tail found in them)
@pytest.mark.vllm
@pytest.mark.extended
def test_vllm_measures_every_weight_version_and_traces_one(tmp_path):
    root = tmp_path / "traces"
    server = start_server(tmp_path, {"profiler": "torch", "torch_profiler_dir": str(root), **CONFIG}, tp=2,
                          env={"VLLM_SERVER_DEV_MODE": "1"})
    server.name = "vLLM"
    measure_trace_scrape_mark(server, root, tmp_path)


# `make test-extended` (CI's 25 minutes: docs/testing.md) with vLLM's: in CI, the step logs of both TP=1 servers
# (steps measured, a slow step and a rollout's tail found in them: tests/helpers/flight.py, rollout_tail.py) and
# rlprof's series on vLLM's /metrics (the anomalies counted there)
@pytest.mark.extended
def test_sglang_measures_every_weight_version_and_traces_one(tmp_path):
    if not sglang_server.available():
        pytest.skip("SGLang environment (.venv-sglang) not built: make env")
    root = tmp_path / "traces"
    server = sglang_server.start_server(tmp_path, {"torch_profiler_dir": str(root), **CONFIG}, tp=2,
                                        extra=["--enable-metrics"])
    server.name = "SGLang"
    measure_trace_scrape_mark(server, root, tmp_path)


def measure_trace_scrape_mark(server, root, tmp_path, ranks: int = 2) -> None:
    """The whole story on one server (TP=2), which is stopped after."""
    try:
        check(drive(server, root), root, ranks=ranks)
        dumped(server, root, ranks=ranks)
        scraped(server, tmp_path, ranks=ranks)
        marked(server, root, ranks=ranks)
    finally:
        server.stop()
