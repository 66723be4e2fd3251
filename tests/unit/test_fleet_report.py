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


def test_a_replica_that_is_not_its_steps_slowest_and_lost_a_rank_file_is_named_and_fails_the_report(save_path, tmp_path,
                                                                                                     capsys):
    """A step's row is its slowest replica's; a file another replica could not read is named all the same."""
    root = tmp_path / "save_path"
    shutil.copytree(save_path, root)
    cut = next((root / REPLICAS[2] / "global_step_6" / "ranks").glob("rank1.*"))
    cut.write_bytes(cut.read_bytes()[:2000])
    out = tmp_path / "report.json"
    assert rlprof(["report", str(root), "-q", "--no-cache", "--json", str(out), "-o", str(tmp_path / "r.html")]) == 1
    data = json.loads(out.read_text())
    six = {s["global_step"]: s for s in data["steps"]}[6]
    assert six["slowest_replica"] == REPLICAS[1] and not six["unreadable"]  # the row is another replica's
    named = [n for n in data["notes"] if REPLICAS[2] in n and cut.name in n]
    assert len(named) == 1 and named[0].startswith(f"unreadable: step 6 (replica {REPLICAS[2]}): ")
    assert named[0] in capsys.readouterr().err


def test_replicas_are_ranked_on_their_measured_steps_not_on_traced_windows_of_other_lengths(tmp_path):
    """Three replicas traced at step 6 with their step logs: replica 1's traced window is the longest (1.6x),
    replica 2's is cut short (0.5x: ``max_iterations`` stopping it early), but replica 2's measured step, every
    iteration of it, is the slowest. Every replica has a measured step, so they are ranked on it and replica 2
    is the slowest, the page and the JSON saying which figure ranked them; with one replica's step logs gone,
    no traced window is ranked against a measured step: the traced windows rank them."""
    root = tmp_path / "save_path"
    for r, replica in enumerate(REPLICAS):
        copy_step(FIXTURE, root / replica / "global_step_6", 6)
        write_measured(root / replica, 6, 6, ranks=2, slow=3.0 if r == 2 else 1.0)
    stretch(root / REPLICAS[1] / "global_step_6", 1.6)
    stretch(root / REPLICAS[2] / "global_step_6", 0.5)
    out = tmp_path / "report.json"
    assert rlprof(["report", str(root), "-q", "--no-cache", "--json", str(out), "-o", str(tmp_path / "r.html")]) == 0
    (six,) = json.loads(out.read_text())["steps"]
    traced = {r["name"]: r["iteration_ms_total"] for r in six["replicas"]}
    assert max(traced, key=traced.get) == REPLICAS[1]  # what ranking on the traced windows would have said
    assert six["slowest_replica"] == REPLICAS[2] and six["ranked_by"].startswith("measured step")
    assert six["replica_spread"] == pytest.approx(3.0, rel=0.05)  # measured totals: 3x the median's
    assert "measured step (ms in iterations)" in (tmp_path / "r.html").read_text()
    shutil.rmtree(root / REPLICAS[0] / "steps")
    assert rlprof(["report", str(root), "-q", "--no-cache", "--json", str(out)]) == 0
    (six,) = json.loads(out.read_text())["steps"]
    assert six["slowest_replica"] == REPLICAS[1] and six["ranked_by"].startswith("traced window")


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


def test_a_replicas_briefs_in_columns_give_back_each_steps_numbers():
    """A fleet keeps each replica-step in brief, in columns (``brief.Briefs``), taken from its row: what
    comes back is the row's numbers, whatever the stages (one missing, one appearing later), a None, a
    traced step's own state, a step measured again, and the columns written as bytes and read back."""
    from rlprof_plugins.report.plan.brief import STAGE_KEYS, Briefs

    def row(iterations, busy, mean, span, imbalance, straggler, stages):
        return {"iterations": iterations, "iteration_ms_total": busy, "mean_ms": mean, "span_ms": span,
                "imbalance": imbalance, "straggler": {"rank": straggler} if straggler else None,
                "stages": {s[0]: dict(zip(STAGE_KEYS, s[1:])) for s in stages}}

    briefs = [
        [10, 50.5, 5.05, 80.0, 1.2, "rank1", [["decode", 8, 5.5, 7.0, 0, 64], ["prefill", 2, 3.25, 4.0, 512, 0]]],
        [3, 9.0, 3.0, 20.0, None, None, [["decode", 3, 3.0, None, 0, 24]]],  # no prefill, no imbalance
        [4, 12.0, None, 0.0, 1.0, "rank0", [["prefill", 1, 2.0, 2.0, 64, 0], ["mixed", 3, 3.3, 4.4, 8, 8]]],
        [10, 50.5, 5.05, 80.0, 1.2, "rank1", [["decode", 8, 5.5, 7.0, 0, 64], ["prefill", 2, 3.25, 4.0, 512, 0]]],
    ]

    def same(columns, place, b, traced=None):
        n = columns.numbers(place)
        assert (n["iterations"], n["iteration_ms_total"], n["mean_ms"], n["span_ms"], n["imbalance"],
                n["straggler"]) == tuple(b[:6])
        assert n["stages"] == {s[0]: dict(zip(("iterations", "mean_ms", "p90_ms", "prefill_tokens",
                                                "decode_tokens"), s[1:])) for s in b[6]}
        assert isinstance(n["iterations"], int) and all(isinstance(s["iterations"], int) for s in n["stages"].values())
        assert (n["state"], n["traced"], n["directory"]) == (("done", True, "/steps/7") if traced else
                                                             ("measured", False, "/logs"))

    columns = Briefs("r0", "/logs")
    places = [columns.add(row(*b)) for b in briefs[:3]]
    again = Briefs.of_bytes(columns.to_bytes())  # as the measured steps' store keeps them
    again.name, again.folder = "r0", "/logs"
    assert places == [0, 1, 2] and len(again) == 3
    for place, b in zip(places, briefs):
        same(columns, place, b)
        same(again, place, b)
    assert again.add(row(*briefs[3]), ("done", "/steps/7")) == 3
    same(again, 3, briefs[3], traced=True)
    again.set(1, row(*briefs[2]))  # measured again: its newer numbers
    same(again, 1, briefs[2])
    same(again, 2, briefs[2])
    assert columns.time(0) == 5.5 and columns.time(2) is None  # decode's mean, else the step's mean
    with pytest.raises(ValueError):
        Briefs.of_bytes(columns.to_bytes()[:-3])


def test_the_measured_steps_store_adds_only_new_steps_and_reads_everything_again_when_it_changed(tmp_path, monkeypatch):
    """The report's store of measured numbers (``measured_rows.measured_steps``): a warm run adds a line
    per new step, and the numbers are a whole read's; a store that is not as the cache left it (cut
    short) is written anew, never read half; one that cannot be written gives every step from the logs."""
    from rlprof_plugins.step_logs.steps import measured_numbers, read_steps
    from rlprof_plugins.report.plan import measured_rows
    from rlprof_plugins.report.plan.state_store import StateStore
    from rlprof_plugins.report.plan.measured_rows import NUMBERS, measured_steps

    def whole() -> dict:
        records, _ = read_steps(tmp_path)
        return {step: measured_numbers(ranks) for step, ranks in records.items() if isinstance(step, int)}

    def lines() -> int:
        return len((tmp_path / ".rlprof-report-cache" / NUMBERS).read_bytes().splitlines())

    write_measured(tmp_path, 1, 20, ranks=2)
    measured, warnings = measured_steps(tmp_path, StateStore(tmp_path))
    assert not warnings and {s: measured[s] for s in measured} == whole() and lines() == 20
    write_measured(tmp_path, 21, 21, ranks=2)
    measured, _ = measured_steps(tmp_path, StateStore(tmp_path))
    assert lines() == 21 and list(measured) == list(range(1, 22)) and measured[21] == whole()[21]
    assert measured.briefs.numbers(measured.place(21))["iterations"] == whole()[21]["iterations"]
    store = tmp_path / ".rlprof-report-cache" / NUMBERS
    store.write_bytes(store.read_bytes()[:-10])  # cut short: written anew, every line once
    write_measured(tmp_path, 22, 22, ranks=2)
    measured, _ = measured_steps(tmp_path, StateStore(tmp_path))
    assert lines() == 22 and {s: measured[s] for s in measured} == whole()
    write_measured(tmp_path, 22, 22, ranks=1)  # a rank's second line for the newest step: measured again
    measured, _ = measured_steps(tmp_path, StateStore(tmp_path))
    assert lines() == 23 and len(measured) == 22 and {s: measured[s] for s in measured} == whole()
    assert measured.briefs.numbers(measured.place(22))["iterations"] == whole()[22]["iterations"]
    measured, _ = measured_steps(tmp_path, StateStore(tmp_path, enabled=False))  # --no-cache: nothing kept
    assert {s: measured[s] for s in measured} == whole() and lines() == 23
    write_measured(tmp_path, 23, 23, ranks=2)

    def refused(*_args):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(measured_rows, "write_bytes_atomic", refused)  # the store cannot be written this time
    cache = StateStore(tmp_path)
    measured, _ = measured_steps(tmp_path, cache)
    assert {s: measured[s] for s in measured} == whole() and len(measured) == 23  # every step, not the new one
    assert "Permission denied" in cache.write_error


def write_measured(root: Path, first: int, last: int, ranks: int, slow: float = 1.0) -> None:
    """Step logs of steps ``first``..``last``, as the engines append them."""
    from rlprof_plugins.metrics.record import BUCKETS_MS, StageRecord, StepRecord

    (root / "steps").mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        with (root / "steps" / f"rank{rank}.jsonl").open("a") as f:
            for step in range(first, last + 1):
                counts = [0] * len(BUCKETS_MS)
                counts[3] = 10 + step
                decode = StageRecord(10 + step, slow * (5.0 * step + rank), 2.0, 0, 80, 80, counts)
                f.write(StepRecord(step, "weight_version", f"rank{rank}", 100.0 + step, 100.5 + step, 10 + step,
                                   decode.total_ms, 1.0, {"decode": decode}).encode())


def test_the_page_alone_keeps_what_it_shows_and_is_the_same_page(tmp_path):
    """Without ``--json`` or ``--csv`` a fleet's rows do not keep the measured numbers they were made of:
    the page is byte for byte the one written beside the JSON, with replicas that have different steps (one
    lacks the newest), warm and cold."""
    root = tmp_path / "save_path"
    for r, (first, last) in enumerate([(1, 40), (1, 25), (30, 45)]):
        write_measured(root / f"agent_loop_rollout_replica_{r}", first, last, ranks=2, slow=1.0 + r / 10)
    for cache in (["--no-cache"], [], []):
        assert rlprof(["report", str(root), "-q", *cache, "-o", str(tmp_path / "alone.html")]) == 0
        assert rlprof(["report", str(root), "-q", *cache, "-o", str(tmp_path / "beside.html"),
                       "--json", str(tmp_path / "r.json")]) == 0
        page = (tmp_path / "alone.html").read_text()
        assert page == (tmp_path / "beside.html").read_text()
    steps = json.loads((tmp_path / "r.json").read_text())["steps"]
    assert [s["global_step"] for s in steps] == list(range(1, 46))
    assert [len(s["replicas"]) for s in steps] == [2] * 25 + [1] * 4 + [2] * 11 + [1] * 5
    assert "data-replica='agent_loop_rollout_replica_1'><summary>agent_loop_rollout_replica_1: 25 step(s)" in page


@pytest.mark.parametrize("command", ["summary", "report"])
def test_one_progress_line_for_three_replicas_by_two_steps(save_path, tmp_path, command):
    """Progress over a whole fleet is one line: in a log (stderr a pipe) one line counts what was read,
    nothing per replica-step; on a terminal one line rewritten in place, ended once."""
    import os
    import pty
    import subprocess
    import sys

    rlprof_bin = Path(sys.executable).parent / "rlprof"
    extra = ["-o", str(tmp_path / "page.html"), "--no-cache"] if command == "report" else []
    logged = subprocess.run([rlprof_bin, command, str(save_path), *extra], capture_output=True, text=True, timeout=300)
    assert logged.returncode == 0, logged.stderr
    lines = logged.stderr.splitlines()
    assert not [line for line in lines if line.startswith("reading ")], lines
    assert [line for line in lines if line.startswith("read ")] == ["read 12 traces (0 MB) in 6 step folders"], lines  # 2 ranks each
    primary, secondary = pty.openpty()
    try:
        shown = subprocess.run([rlprof_bin, command, str(save_path), *extra], stdout=subprocess.DEVNULL,
                               stderr=secondary, timeout=300)
        os.close(secondary)
        written = b""
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # the terminal's other end is closed: everything was read
                break
            if not chunk:
                break
            written += chunk
    finally:
        os.close(primary)
    assert shown.returncode == 0
    text = written.decode()
    assert text.count("\r") >= 6 and text.count("reading ") >= 6  # each step's line, written in place
    assert text.rstrip("\r\n").count("\n") == 0, text  # one line: ended once, at the end


def test_the_replica_time_lost_waiting_is_what_the_replicas_clocks_say(tmp_path):
    """Three replicas of step 5, the third stretched: each replica sits idle from its own last iteration to the
    third's. The fleet report's ``replicas_waiting`` is the sum of those waits by the step logs' clocks, its
    share of three replicas times the step's span, each replica's end, and the one waited for; step logs that
    do not say when their generation ended (an older rlprof's) give none."""
    from rlprof_plugins.metrics.record import BUCKETS_MS, StageRecord, StepRecord

    root = tmp_path / "save_path"
    ends = [101.0, 101.5, 103.0]
    for r, end in enumerate(ends):
        folder = root / REPLICAS[r] / "steps"
        folder.mkdir(parents=True)
        counts = [0] * len(BUCKETS_MS)
        counts[3] = 10
        for rank in range(2):
            decode = StageRecord(10, 50.0 * (r + 1), 6.0, 0, 80, 80, counts)
            record = StepRecord(5, "weight_version", f"rank{rank}", 100.0 + rank * 0.01, 104.0, 10, decode.total_ms,
                                1.0, {"decode": decode}, last_iteration_at=end - rank * 0.25)
            (folder / f"rank{rank}.jsonl").write_text(record.encode())
    out = tmp_path / "report.json"
    assert rlprof(["report", str(root), "-q", "--no-cache", "--json", str(out), "-o", str(tmp_path / "r.html")]) == 0
    (five,) = json.loads(out.read_text())["steps"]
    waiting = five["replicas_waiting"]
    lost = sum(ends[-1] - end for end in ends)  # each replica's last rank ended at its ``end``
    assert waiting["lost_ms"] == pytest.approx(1000 * lost) and waiting["last"] == REPLICAS[2]
    assert waiting["span_ms"] == pytest.approx(1000 * (ends[-1] - 100.0))
    assert waiting["share_pct"] == pytest.approx(round(100 * lost / (3 * (ends[-1] - 100.0)), 1))
    assert waiting["ends_ms"] == {name: pytest.approx(1000 * (end - 100.0)) for name, end in zip(REPLICAS, ends)}
    for r in range(3):  # the step logs of an rlprof that did not record the generation's end
        for path in (root / REPLICAS[r] / "steps").glob("*.jsonl"):
            data = json.loads(path.read_text())
            del data["last_iteration_at"]
            path.write_text(json.dumps(data) + "\n")
    assert rlprof(["report", str(root), "-q", "--no-cache", "--json", str(out), "-o", str(tmp_path / "r.html")]) == 0
    assert json.loads(out.read_text())["steps"][0]["replicas_waiting"] is None
