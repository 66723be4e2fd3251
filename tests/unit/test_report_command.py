"""``rlprof report`` on real traces (the vLLM 0.32 TP=2 fixture and sessions recorded here):
the page opened in headless Chromium with the network off, the JSON and CSV
equal to what the page shows, the cache of passes, and every kind of bad input
named on the page and in the exit code."""

import csv
import gzip
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from rlprof_plugins.cli.command import main as rlprof
from rlprof_plugins.report.plan.state_store import CACHE_DIR
from rlprof_plugins.report.execute.passes import PASSES_DIR, entry_key
from tests.helpers.browser import cells_match_json, open_page
from tests.unit.test_report_steps import FIXTURE, slowest_by_stage
from tests.unit.test_chunks import record


@pytest.fixture
def root(tmp_path) -> Path:
    shutil.copytree(FIXTURE, tmp_path / "root")
    return tmp_path / "root"


def report(root: Path, *args: str) -> tuple[int, dict]:
    out = root.parent / "report.json"
    code = rlprof(["report", str(root), "--quiet", "--json", str(out), *args])
    return code, json.loads(out.read_text())


def test_the_page_shows_every_step_stage_and_rank_as_the_json_says(root, tmp_path):
    code, data = report(root, "--compare", "3", "4", "--csv", str(tmp_path / "csv"))
    assert code == 0 and not data["notes"]
    page = open_page(root / "report.html", tmp_path / "shot.png")
    assert not page.console_errors and not page.blocked
    assert page.details == ["step-3", "step-4"]
    assert sorted(page.series) == ["decode", "prefill"]  # the trend chart, split by stage
    # a panel per stage (a point per step and its line), a bar per iteration (6 in step 3, 10 in step 4)
    assert page.marks["trend"] == 2 * (2 + 1) and page.marks["timeline"] == 6 + 10 and page.marks["stacked"] >= 4
    assert page.distinct_colours() > 8  # drawn, not blank
    # the steps table (10 numbers a step, 5 a stage) and each step's rank table (7 a rank), cell by cell
    assert cells_match_json(page, data) == sum(10 + 5 * len(s["stages"]) + 7 * len(s["ranks"]) for s in data["steps"])
    by_rank = {(c["step"], c["rank"]) for c in page.cells if c["rank"]}
    assert by_rank == {(3, "rank0"), (3, "rank1"), (4, "rank0"), (4, "rank1")}
    # the numbers are the trace's: each stage's mean is the slowest rank's per iteration
    for step in data["steps"]:
        for stage, ms in slowest_by_stage(Path(step["directory"])).items():
            assert abs(step["stages"][stage]["mean_ms"] - sum(ms) / len(ms)) < 0.002
    ops = data["compare"]["operators"]["cpu"]
    change = [abs(o["change_per_iteration_ms"]) for o in ops]
    assert change == sorted(change, reverse=True) and all(o["a_iterations"] and o["b_iterations"] for o in ops)
    assert any(c["field"].startswith("compare.cpu") for c in page.cells)
    steps_csv = list(csv.DictReader((tmp_path / "csv" / "steps.csv").open()))
    assert [(r["global_step"], r["stage"], float(r["mean_ms"])) for r in steps_csv] == [
        (str(s["global_step"]), stage, s["stages"][stage]["mean_ms"]) for s in data["steps"] for stage in s["stages"]]
    iterations = list(csv.DictReader((tmp_path / "csv" / "iterations.csv").open()))
    assert len(iterations) == sum(len(s["timeline"]) for s in data["steps"]) == 16


def cached(root: Path, capsys) -> tuple[int, int, dict]:
    """``rlprof report ROOT``: how many traces it read and how many its cache of passes answered, and the JSON."""
    capsys.readouterr()
    code, data = report(root)
    line = capsys.readouterr().out
    assert code == 0, line
    read, hits = re.search(r"(\d+) trace\(s\), (\d+) from the cache of passes", line).groups()
    return int(read), int(hits), data


def test_a_second_run_reads_only_what_changed(root, capsys):
    # step 3 of two ranks, step 4 of two ranks by stage: every trace's pass is kept, the smallest too
    assert cached(root, capsys)[:2] == (6, 0)
    read, hits, first = cached(root, capsys)
    assert (read, hits) == (6, 6)
    shutil.copytree(root / "global_step_4", root / "global_step_5")  # one more step
    trace = next((root / "global_step_3").rglob("rank1.*.gz"))
    os.utime(trace, ns=(trace.stat().st_atime_ns, trace.stat().st_mtime_ns + 10**9))  # a rank rewrote its file
    read, hits, third = cached(root, capsys)
    assert (read, hits) == (10, 5)  # step 3's rank 1 and every trace of step 5 read again
    assert [s["global_step"] for s in third["steps"]] == [3, 4, 5]
    assert [s for s in third["steps"] if s["global_step"] < 5] == first["steps"]
    passes = root / CACHE_DIR / PASSES_DIR
    assert {_cached_file(p).split("/")[0] for p in passes.iterdir()} == {f"global_step_{s}" for s in (3, 4, 5)}
    (passes / "damaged.rlprof-cache").write_bytes(b"[7, ['global_step_3/ranks\n")  # no key: dropped with them
    shutil.rmtree(root / "global_step_5")  # pruned: its traces' passes go too
    cached(root, capsys)
    kept = [_cached_file(p) for p in passes.iterdir()]
    assert {rel.split("/")[0] for rel in kept} == {"global_step_3", "global_step_4"} and len(kept) == len(set(kept)) == 6


def _cached_file(entry: Path) -> str:
    """The trace a pass cache entry was read from (its path under the root)."""
    return entry_key(entry.read_bytes().partition(b"\n")[0])[1][0]


def test_a_root_it_cannot_write_its_cache_to_is_reported_and_read_in_full(root, tmp_path):
    (root / CACHE_DIR).write_text("not a folder")  # fails as a read-only root does, whoever runs the test
    code, data = report(root, "-o", str(tmp_path / "page.html"))
    assert code == 0 and [s["global_step"] for s in data["steps"]] == [3, 4]
    assert [n for n in data["notes"] if n.startswith("no result cache")], data["notes"]


def test_an_unknown_steps_range_names_the_steps_there_are(root, capsys):
    code, data = report(root, "--steps", "40-50")
    assert code == 1 and data["steps"] == []
    assert data["notes"] == ["nothing to report: no step in 40-50 (steps found: 3-4)"]
    page = open_page(root / "report.html")
    assert page.notes == data["notes"] and not page.console_errors
    code, data = report(root, "--steps", "4")
    assert code == 0 and [s["global_step"] for s in data["steps"]] == [4]
    assert rlprof(["report", str(root), "--steps", "9-3"]) == 2  # a range that ends before it starts
    assert rlprof(["report", str(root), "--compare", "3", "9"]) == 1
    assert "--compare: no step 9" in capsys.readouterr().err


def test_failed_corrupt_and_recording_steps_keep_their_rows_and_are_named(root, tmp_path):
    broken = next((root / "global_step_3").rglob("rank0.*.gz"))
    broken.write_bytes(gzip.compress(gzip.decompress(broken.read_bytes())[:5000]))
    shutil.copytree(root / "global_step_4", root / "global_step_5")
    for step, state in ((4, "failed"), (5, "recording")):
        path = root / f"global_step_{step}" / "manifest.json"
        data = json.loads(path.read_text())
        data["state"] = state
        if state == "failed":
            data["writers"]["rank1"]["error"] = "RuntimeError: stitching failed"
        path.write_text(json.dumps(data))
    code, data = report(root)
    assert code == 1
    assert [s["global_step"] for s in data["steps"]] == [3, 4, 5]
    notes = data["notes"]
    assert notes[0].startswith(f"unreadable: step 3: {broken.name}: TraceFormatError") and "kept: rank1" in notes[0]
    assert notes[1] == "failed: step 4: RuntimeError: stitching failed"
    assert notes[2].startswith("step 5 is still recording")
    page = open_page(root / "report.html")
    assert page.notes == notes and page.details == ["step-3", "step-4", "step-5"] and not page.console_errors
    assert cells_match_json(page, data) > 0


def test_the_profilers_pauses_show_apart_on_the_page(tmp_path):
    status, _ = record(tmp_path, 7, chunk=3, n=8)
    code, data = report(tmp_path)
    (step,) = data["steps"]
    assert code == 0 and step["profiler_pauses"] == status["stops"] == 3
    page = open_page(tmp_path / "report.html")
    pauses = [c for c in page.cells if c["field"] in ("profiler_pauses", "profiler_pause_ms")]
    assert [c["value"] for c in pauses] == [3, step["profiler_pause_ms"]] and step["profiler_pause_ms"] > 0
    (rank,) = step["rank_time"].values()
    assert rank["pause_ms"] > 0 and rank["iterations_ms"] > 0
