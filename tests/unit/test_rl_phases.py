"""The RL phases between generations (``metrics/phases.py``): timed, kept in the open step, written with it, and
shown in the report's JSON, ``phases.csv``, ``summary`` and the ``/metrics`` series."""

from __future__ import annotations

import csv
import json
import logging
import time

import pytest

from rlprof_plugins.cli.command import main as rlprof
from rlprof_plugins.metrics import phases
from rlprof_plugins.metrics.phases import PhaseRecord
from rlprof_plugins.metrics.record import RankTotals, StepRecord
from rlprof_plugins.metrics.timer import StepMetrics
from rlprof_plugins.stages import IterationInfo


def test_timed_returns_what_the_call_returns_raises_what_it_raises_and_records_both():
    got: list[PhaseRecord] = []
    assert phases.timed(phases.CACHE_RESET, "flush_cache", lambda: 7, got.append) == 7

    def fails():
        time.sleep(0.02)
        raise ValueError("the engine's own error")

    with pytest.raises(ValueError, match="the engine's own error"):
        phases.timed(phases.WEIGHT_UPDATE, "update_weights_from_disk", fails, got.append, detail="x")
    assert [(r.phase, r.call) for r in got] == [("cache_reset", "flush_cache"),
                                               ("weight_update", "update_weights_from_disk")]
    assert got[1].ms >= 20 and got[1].detail == "x" and abs(got[1].started_at - time.time()) < 60


def test_a_failing_delivery_is_logged_and_the_engines_answer_stands(caplog):
    def broken(_record):
        raise RuntimeError("no step metrics")

    with caplog.at_level(logging.WARNING, logger="rlprof"):
        assert phases.timed(phases.PAUSE, "pause_generation", lambda: "paused", broken) == "paused"
    assert "the pause phase (pause_generation) was not recorded: RuntimeError: no step metrics" in caplog.text


def record(phase: str, started: float, ms: float, call: str = "call") -> PhaseRecord:
    return PhaseRecord(phase, call, started, ms)


def test_the_open_step_keeps_its_phases_the_outer_of_nested_ones_and_a_bounded_number():
    """Phases go into the step open when they ran; a cache reset inside a weight update is the update's; a step
    of phases alone is still written (its start the first phase's); past ``MAX_PER_STEP`` only a count grows."""
    records: list[StepRecord] = []
    metrics = StepMetrics("rank0", records.append, wall=lambda: 2000.0)
    metrics.set_step(1, "request")
    metrics.begin()
    metrics.end(IterationInfo(0, 1, 1))
    metrics.phase(record(phases.CACHE_RESET, 1000.10, 5.0, "flush_cache"))  # inside the update below
    metrics.phase(record(phases.WEIGHT_UPDATE, 1000.0, 200.0))
    metrics.phase(record(phases.WAKE_UP, 1000.5, 10.0))
    metrics.set_step(2, "weight_version")
    for k in range(phases.MAX_PER_STEP + 3):
        metrics.phase(record(phases.CACHE_RESET, 1001.0 + k, 1.0))
    metrics.set_step(3, "weight_version")
    first, second = records
    assert [(p.phase, p.ms) for p in first.phases] == [("weight_update", 200.0), ("wake_up", 10.0)]
    assert second.iterations == 0 and second.started_at == 1001.0
    assert len(second.phases) == phases.MAX_PER_STEP and second.phases_dropped == 3
    back = StepRecord.decode(first.encode())
    assert back.phases == first.phases and back.phases_dropped == 0
    combined = back.combine(StepRecord.decode(second.encode()))
    assert len(combined.phases) == 2 + phases.MAX_PER_STEP and combined.phases_dropped == 3
    totals = RankTotals("rank0")
    totals.add(first)
    totals.add(second)
    again = RankTotals.decode(totals.encode())
    assert again.phase_ms == {"weight_update": 200.0, "wake_up": 10.0, "cache_reset": 64.0}
    assert again.phase_counts == {"weight_update": 1, "wake_up": 1, "cache_reset": 64}


def test_a_broken_phase_in_a_line_is_dropped_and_the_step_stands():
    line = {"global_step": 1, "rank": "rank0", "started_at": 1.0, "ended_at": 2.0, "iterations": 0, "busy_ms": 0,
            "idle_ms": 0, "stages": {}, "phases": [{"phase": "sleep", "call": "sleep", "started_at": 1.5, "ms": 3},
                                                   {"phase": "sleep", "ms": "long"}, "nonsense"]}
    (kept,) = StepRecord.from_json(line).phases
    assert (kept.phase, kept.ms) == ("sleep", 3)


def measure(root) -> None:
    """Two ranks and two steps, each a generation then the phases a trainer runs: after step 1's last iteration,
    the engine waits 0.2 s, sleeps, updates its weights (rank1 slower), is woken; step 2 the same, once."""
    from rlprof_plugins.config.options import parse_options
    from rlprof_plugins.metrics.recorder import recorder_for

    for rank, update_ms in (("rank0", 300.0), ("rank1", 450.0)):
        recorder = recorder_for(str(root), rank, parse_options({}))
        for step in (1, 2):
            recorder.started(step)
            for batch in (4, 4, 1, 1):  # full batches, then a tail of one request
                recorder.begin()
                time.sleep(0.002)
                recorder.end(IterationInfo(0, batch, batch))
            at = time.time() + 0.2
            recorder.phase(PhaseRecord(phases.SLEEP, "sleep", at, 40.0, detail="level=1"))
            recorder.phase(PhaseRecord(phases.WEIGHT_UPDATE, "collective_rpc:update_weights", at + 0.1, update_ms))
            recorder.phase(PhaseRecord(phases.WAKE_UP, "wake_up", at + 1.0, 20.0, weight_version=str(step)))
        recorder.close()


def test_the_report_summary_and_metrics_show_each_steps_phases(tmp_path, capsys):
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from rlprof_plugins.metrics.series import register

    root = tmp_path / "root"
    measure(root)
    assert rlprof(["report", str(root), "-q", "--json", str(tmp_path / "report.json"), "--csv",
                   str(tmp_path / "csv")]) == 0
    steps = json.loads((tmp_path / "report.json").read_text())["steps"]
    assert [s["global_step"] for s in steps] == [1, 2]
    for step in steps:
        by_rank = step["measured"]["phases"]
        assert sorted(by_rank) == ["rank0", "rank1"]
        assert by_rank["rank1"]["totals"] == {"wake_up": {"count": 1, "ms": 20.0},
                                              "weight_update": {"count": 1, "ms": 450.0},
                                              "sleep": {"count": 1, "ms": 40.0}}
        assert 190 <= by_rank["rank0"]["after_generation_ms"] <= 1000, by_rank["rank0"]
        assert by_rank["rank0"]["records"][2]["weight_version"] == str(step["global_step"])
    with open(tmp_path / "csv" / "phases.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["global_step"], r["rank"], r["phase"]) for r in rows] == [
        (s, r, p) for s in ("1", "2") for r in ("rank0", "rank1") for p in ("sleep", "weight_update", "wake_up")]
    assert [bool(r["after_generation_ms"]) for r in rows[:3]] == [True, False, False]
    assert rows[0]["detail"] == "level=1" and rows[4]["ms"] == "450.0"

    registry = CollectorRegistry()
    register(root, registry)
    samples = {(s.name, s.labels.get("phase"), s.labels.get("rank")): s.value
               for family in text_string_to_metric_families(generate_latest(registry).decode())
               for s in family.samples}
    # the open step (2) is written when the recorder closes: both steps count
    assert samples[("rlprof_rl_phase_seconds_total", "weight_update", "rank1")] == pytest.approx(0.9)
    assert samples[("rlprof_rl_phases_total", "sleep", "rank0")] == 2


def test_summary_names_a_traced_steps_phases(tmp_path, capsys):
    """A traced step (real vLLM TP=2 traces) whose phases the step metrics measured: ``summary`` names each phase
    at its longest rank, in its JSON and its table."""
    from tests.unit.test_fleet_report import FIXTURE, copy_step

    root = tmp_path / "root"
    copy_step(FIXTURE, root / "global_step_1", 1)
    measure(root)
    assert rlprof(["summary", str(root), "--json", "-q"]) == 0
    (step,) = json.loads(capsys.readouterr().out)["steps"]
    assert step["phases"]["weight_update"] == {"ms": 450.0, "count": 1, "rank": "rank1"}
    assert list(step["phases"]) == ["wake_up", "weight_update", "sleep"]
    assert rlprof(["summary", str(root), "-q"]) == 0
    text = capsys.readouterr().out
    assert "step 1: RL phases wake up 20.0 ms (1x, on rank0), weight update 450.0 ms (1x, on rank1)" in text, text


def test_the_page_shows_the_trainers_turn_and_each_phase_after_generation(tmp_path):
    """The rollout section's bar of each step goes on past generation: the wait for the trainer, then each phase
    on the rank the step waited on; its table shows the JSON's numbers (headless Chromium, network off)."""
    from tests.helpers.browser import cells_match_json, open_page

    root = tmp_path / "root"
    measure(root)
    out = tmp_path / "report.json"
    assert rlprof(["report", str(root), "-q", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    page = open_page(root / "report.html", tmp_path / "phases.png")
    assert page.console_errors == []
    fields = {(c["step"], c["field"]) for c in page.cells}
    waited_on = {s["global_step"]: s["tail"]["rank"] for s in data["steps"]}
    assert {(s, f"measured.phases.{rank}.{f}") for s, rank in waited_on.items()
            for f in ("after_generation_ms", "total_ms")} <= fields
    assert cells_match_json(page, data) >= 4
    # a bar a step: full batches, the tail, the wait for the trainer and the three phases
    assert page.marks.get("stacked") == 2 * 6, page.marks
