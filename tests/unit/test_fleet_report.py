"""The whole rollout fleet in one report (issue 55): every replica side by side per RL step.

On verl's documented layout (``<save_path>/agent_loop_rollout_replica_<r>/global_step_<N>/``) built
from real vLLM TP=2 traces (tests/fixtures/vllm-0.32-cpu-tp2), one replica's step stretched 1.6x in
time: the report lists each step once with its three named replicas and names the stretched one the
slowest; ``summary`` lists every replica's steps; servers sharing one directory are read as replicas;
``--replica`` narrows the report to one of them.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from rlprof_plugins.cli.command import main as rlprof
from rlprof_plugins.store.servers import CLAIM, SERVERS_DIR, replicas_of, server_root, servers_in
from tests.helpers.installed import REPO

FIXTURE = REPO / "tests" / "fixtures" / "vllm-0.32-cpu-tp2" / "global_step_3"
REPLICAS = [f"agent_loop_rollout_replica_{r}" for r in range(3)]


def stretch(folder: Path, factor: float) -> None:
    """Every event of every rank trace in ``folder`` ``factor`` times as long, from the trace's start."""
    for path in (folder / "ranks").glob("*.pt.trace.json.gz"):
        trace = json.loads(gzip.decompress(path.read_bytes()))
        events = trace["traceEvents"]
        start = min(e["ts"] for e in events if isinstance(e.get("ts"), (int, float)))
        for e in events:
            if isinstance(e.get("ts"), (int, float)):
                e["ts"] = start + (e["ts"] - start) * factor
            if isinstance(e.get("dur"), (int, float)):
                e["dur"] = e["dur"] * factor
        path.write_bytes(gzip.compress(json.dumps(trace).encode()))


def copy_step(source: Path, target: Path, step: int) -> None:
    shutil.copytree(source, target)
    manifest = target / "manifest.json"
    data = json.loads(manifest.read_text())
    data["global_step"] = step
    manifest.write_text(json.dumps(data))


@pytest.fixture(scope="module")
def save_path(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("verl") / "save_path"
    for replica in REPLICAS:
        for step in (5, 6):
            copy_step(FIXTURE, root / replica / f"global_step_{step}", step)
    stretch(root / REPLICAS[1] / "global_step_6", 1.6)
    return root


def test_verls_replica_folders_read_as_three_replicas_per_step_and_the_stretched_one_is_slowest(save_path, tmp_path):
    out = tmp_path / "report.json"
    assert rlprof(["report", str(save_path), "-q", "--no-cache", "--json", str(out), "--csv", str(tmp_path / "csv"),
                   "-o", str(tmp_path / "report.html")]) == 0
    data = json.loads(out.read_text())
    assert [s["global_step"] for s in data["steps"]] == [5, 6]
    assert data["replicas"] == REPLICAS
    for step in data["steps"]:
        assert sorted(r["name"] for r in step["replicas"]) == REPLICAS
        assert all(r["iterations"] > 0 and r["stages"] for r in step["replicas"])
    six = data["steps"][1]
    assert six["slowest_replica"] == REPLICAS[1]
    totals = {r["name"]: r["iteration_ms_total"] for r in six["replicas"]}
    assert totals[REPLICAS[1]] == pytest.approx(1.6 * totals[REPLICAS[0]], rel=0.02)
    assert six["replica_spread"] == pytest.approx(1.6, rel=0.02)
    five = data["steps"][0]
    assert five["replica_spread"] == pytest.approx(1.0, abs=1e-6)  # the same traces: no replica slower
    replicas_csv = (tmp_path / "csv" / "replicas.csv").read_text().splitlines()
    assert replicas_csv[0].startswith("global_step,replica,slowest")
    assert sum(1 for line in replicas_csv if line.startswith(f"6,{REPLICAS[1]},True")) >= 1
    steps_csv = (tmp_path / "csv" / "steps.csv").read_text()
    assert "slowest_replica" in steps_csv.splitlines()[0] and REPLICAS[1] in steps_csv
    page = (tmp_path / "report.html").read_text()
    assert page.count("data-heat-strip") == 1 and "data-slowest" in page
    assert all(f"data-replica='{name}'" in page for name in REPLICAS)


def test_summary_lists_every_replicas_steps(save_path, capsys):
    assert rlprof(["summary", str(save_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert sorted((s["replica"], s["global_step"]) for s in data["steps"]) == sorted(
        (r, step) for r in REPLICAS for step in (5, 6))
    assert all(s["stages"] for s in data["steps"])
    assert rlprof(["summary", str(save_path)]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[0].split()[:2] == ["replica", "step"] and "None" not in table


def test_one_replica_and_a_name_that_is_none(save_path, tmp_path, capsys):
    out = tmp_path / "one.json"
    assert rlprof(["report", str(save_path), "-q", "--no-cache", "--replica", REPLICAS[2], "--json", str(out),
                   "-o", str(tmp_path / "one.html")]) == 0
    data = json.loads(out.read_text())
    assert [s["global_step"] for s in data["steps"]] == [5, 6] and "replicas" not in data
    assert rlprof(["report", str(save_path), "-q", "--replica", "nope", "-o", str(tmp_path / "x.html")]) == 2
    assert "replicas: " + ", ".join(REPLICAS) in capsys.readouterr().err
    assert not (tmp_path / "x.html").exists()


def test_servers_sharing_a_directory_keep_their_own_folders_and_read_as_replicas(tmp_path):
    root = tmp_path / "shared"
    first, second = server_root(root, "host-8000"), server_root(root, "host-8001")
    assert first == root and second == root / SERVERS_DIR / "host-8001"
    assert server_root(root, "host-8000") == root  # the same server, again: its own folder
    assert json.loads((root / CLAIM).read_text())["server"] == "host-8000"
    for server in (first, second):
        copy_step(FIXTURE, server / "global_step_3", 3)
    assert [name for name, _ in servers_in(root)] == ["host-8000", "host-8001"]
    assert [(r.name, r.root) for r in replicas_of(root)] == [("host-8000", root), ("host-8001", second)]
    out = tmp_path / "shared.json"
    assert rlprof(["report", str(root), "-q", "--no-cache", "--json", str(out), "-o", str(tmp_path / "s.html")]) == 0
    (step,) = json.loads(out.read_text())["steps"]
    assert sorted(r["name"] for r in step["replicas"]) == ["host-8000", "host-8001"]


def test_a_claim_whose_server_ended_passes_to_the_next(tmp_path):
    import os
    import subprocess
    import sys

    root = tmp_path / "shared"
    code = ("import sys; from rlprof_plugins.store.servers import server_root; "
            "print(server_root(sys.argv[1], 'gone-8000'))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLPROF_SERVER_")}
    assert subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, env=env,
                          check=True).stdout.strip() == str(root)
    assert server_root(root, "next-8001") == root  # the claimant's process is gone: its folder passes on


def test_a_measured_steps_replica_numbers_are_those_of_its_row():
    """The fleet reads measured-only steps without making their rows: the numbers must be the same."""
    from rlprof_plugins.metrics.reader import measured_numbers
    from rlprof_plugins.metrics.record import BUCKETS_MS, StageRecord, StepRecord
    from rlprof_plugins.report.fleet import measured_replica_numbers, replica_numbers
    from rlprof_plugins.report.measured_rows import measured_row

    counts = [0] * len(BUCKETS_MS)
    counts[4] = 3
    ranks = {f"rank{r}": StepRecord(7, "request", f"rank{r}", 10.0, 12.5, 5, 40.0 + r, 2.0, {
        "decode": StageRecord(3, 30.0 + r, 11.0, 0, 12, 12, counts),
        "prefill": StageRecord(2, 10.0, 6.0, 64, 0, 2, counts)}) for r in range(2)}
    numbers = measured_numbers(ranks)
    row = measured_row(7, numbers, Path("/r"))
    assert measured_replica_numbers("a", numbers, row["directory"]) == replica_numbers("a", row)
