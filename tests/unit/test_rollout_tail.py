"""A rollout step's tail (``metrics/tail.py``), from the iterations the step metrics time.

The iterations here are what an engine's batches do in a rollout: every request at once, the short ones
ending, a long one running on alone. The tail is asserted against what the iterations themselves say (the
time only the long request ran), the curve against the batches, and the memory against a step of a million
iterations.
"""

from __future__ import annotations

import csv
import json
import time

from rlprof_plugins.cli.command import main as rlprof
from rlprof_plugins.metrics.record import StepRecord
from rlprof_plugins.metrics.tail import KEPT, POINTS, StepTail, TailRecord
from rlprof_plugins.metrics.timer import StepMetrics
from rlprof_plugins.stages import IterationInfo

MS = 1_000_000


def run(tail: StepTail, batches: list[int], ms: int = 10, tokens_each: int = 1) -> int:
    """Iterations back to back, ``ms`` each; the end of the last."""
    t = 0
    for batch in batches:
        tail.add(t, t + ms * MS, batch, batch * tokens_each)
        t += ms * MS
    return t


def test_one_response_ten_times_longer_is_the_tail():
    """Eight requests: seven end after 20 iterations, one runs 200. The tail is the 180 iterations only it ran,
    their time and tokens; the curve is full for the first tenth and one request after."""
    tail = StepTail()
    run(tail, [8] * 20 + [1] * 180)
    r = tail.record()
    assert (r.peak_batch, r.tail_iterations, r.tail_tokens) == (8, 180, 180)
    assert r.tail_ms == 180 * 10 and r.span_ms == 200 * 10
    assert r.tail_share == 0.9
    assert r.occupancy == [8, 8] + [1] * (POINTS - 2)


def test_the_tail_starts_after_the_last_iteration_at_half_the_peak():
    """A batch that dips below half and fills again (a second wave of requests) is no tail; the tail starts
    where it fell below half for good. Half the peak itself is not yet the tail."""
    tail = StepTail()
    run(tail, [8] * 10 + [2] * 10 + [6] * 10 + [4] * 5 + [3] * 7 + [1] * 3)
    r = tail.record()
    assert r.peak_batch == 8 and r.tail_iterations == 10 and r.tail_ms == 100 and r.tail_tokens == 7 * 3 + 3


def test_a_step_with_no_tail_and_one_with_none_at_all():
    full = StepTail()
    run(full, [4] * 30)
    r = full.record()
    assert (r.tail_ms, r.tail_iterations, r.occupancy) == (0, 0, [4] * POINTS)
    assert StepTail().record() is None


def test_memory_is_bounded_however_long_the_step():
    """A million iterations keep at most 2 * KEPT for the curve, one entry per batch size, and the curve still
    follows the batches (a batch that falls linearly over the step)."""
    tail = StepTail()
    n = 1_000_000
    t = 0
    for i in range(n):
        batch = 256 - (256 * i) // n
        tail.add(t, t + MS, batch, batch)
        t += MS
    assert len(tail.kept) < 2 * KEPT and len(tail.last_of_batch) == 256
    r = tail.record()
    expected = [256 - int(256 * (k + 0.5) / POINTS) for k in range(POINTS)]
    assert all(abs(a - b) <= 4 for a, b in zip(r.occupancy, expected)), (r.occupancy, expected)  # a stride apart at most
    # the tail: after the last iteration whose batch is at least half of 256, each iteration 1 ms
    last_full = max(i for i in range(n // 2, n) if 256 - (256 * i) // n >= 128)
    assert r.tail_ms == n - (last_full + 1) and r.peak_batch == 256


def test_the_step_record_carries_the_tail_through_the_log():
    """The timer hands it over with the step; a line of the step log reads back the same; a record without one
    (an older line) reads back with none."""
    records: list[StepRecord] = []
    clock = iter(range(0, 10**12, 5 * MS))
    metrics = StepMetrics("rank0", records.append, clock=lambda: next(clock), wall=lambda: 1000.0)
    metrics.set_step(3, "request")
    for batch in [4, 4, 4, 1, 1]:
        metrics.begin()
        metrics.end(IterationInfo(0, batch, batch))
    metrics.set_step(4, "request")
    (record,) = records
    assert record.tail is not None and (record.tail.peak_batch, record.tail.tail_iterations) == (4, 2)
    assert StepRecord.decode(record.encode()).tail == record.tail
    old = record.to_json()
    del old["tail"]
    assert StepRecord.from_json(old).tail is None
    assert TailRecord.from_json({"peak_batch": "x"}) is None


def measure_rollouts(root, steps) -> None:
    """The step metrics of two ranks over ``steps`` of a rollout, written by the real recorder: eight requests at
    once for six iterations, then one running on alone, for 10 iterations on rank0 and 30 on rank1."""
    from rlprof_plugins.config.options import parse_options
    from rlprof_plugins.metrics.recorder import recorder_for

    for rank, alone in (("rank0", 10), ("rank1", 30)):
        recorder = recorder_for(str(root), rank, parse_options({}))
        for step in steps:
            recorder.started(step)
            for batch in [8] * 6 + [1] * alone:
                recorder.begin()
                time.sleep(0.001)
                recorder.end(IterationInfo(0, batch, batch))
        recorder.close()


def test_the_report_shows_each_steps_tail_in_the_json_the_page_and_rollout_csv(tmp_path):
    """Two ranks measure two steps of a rollout: eight requests at once for six iterations, then one request
    running on alone, for 10 iterations on rank0 and 30 on rank1. Each step's tail is rank1's (the longer),
    30 iterations of a batch of one, after a peak of 8; the page's rollout section shows the JSON's numbers
    (opened in headless Chromium), draws a bar a step and each rank's running batch; ``rollout.csv`` holds a
    row a step and rank with the curve's points."""
    from tests.helpers.browser import cells_match_json, open_page

    root = tmp_path / "root"
    measure_rollouts(root, (1, 2))
    out = tmp_path / "report.json"
    assert rlprof(["report", str(root), "-q", "--json", str(out), "--csv", str(tmp_path / "csv")]) == 0
    data = json.loads(out.read_text())
    for step in data["steps"]:
        tail = step["tail"]
        assert (tail["rank"], tail["peak_batch"], tail["tail_iterations"]) == ("rank1", 8, 30), tail
        assert tail["occupancy"][0] == 8 and tail["occupancy"][-1] == 1, tail
    page = open_page(root / "report.html", tmp_path / "rollout.png")
    assert page.console_errors == []
    rollout_cells = [c for c in page.cells if c["field"].startswith(("tail.", "measured.rollout."))]
    assert {(c["step"], c["field"]) for c in rollout_cells} >= {(s, f) for s in (1, 2) for f in (
        "tail.rank", "tail.peak_batch", "tail.tail_ms", "tail.tail_iterations", "measured.rollout.rank1.span_ms")}
    assert cells_match_json(page, data) >= len(rollout_cells)
    assert page.marks.get("stacked") == 4 and page.marks.get("occupancy") == 2, page.marks  # 2 steps x 2 parts; 2 ranks
    with open(tmp_path / "csv" / "rollout.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["global_step"], r["rank"], r["tail_iterations"]) for r in rows] == [
        ("1", "rank0", "10"), ("1", "rank1", "30"), ("2", "rank0", "10"), ("2", "rank1", "30")]
    assert [int(rows[1][f"occupancy_{k}"]) for k in (1, POINTS)] == [8, 1]


def test_summary_gives_a_traced_steps_tail_from_the_step_logs(tmp_path, capsys):
    """A traced step (real vLLM TP=2 traces) whose rollout the step metrics measured: ``summary --json`` holds the
    same tail as the report, and its table says it in a line."""
    from tests.unit.test_fleet_report import FIXTURE, copy_step

    root = tmp_path / "root"
    copy_step(FIXTURE, root / "global_step_1", 1)
    measure_rollouts(root, (1,))
    assert rlprof(["report", str(root), "-q", "--json", str(tmp_path / "report.json")]) == 0
    capsys.readouterr()
    assert rlprof(["summary", str(root), "--json", "-q"]) == 0
    (summarised,) = json.loads(capsys.readouterr().out)["steps"]
    (reported,) = json.loads((tmp_path / "report.json").read_text())["steps"]
    assert summarised["tail"] == reported["tail"] and summarised["tail"]["tail_iterations"] == 30
    assert rlprof(["summary", str(root), "-q"]) == 0
    text = capsys.readouterr().out
    assert "step 1: the rollout's tail" in text and "(30 iterations after" in text and "on rank1" in text, text
