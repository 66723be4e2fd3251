"""The flight recorder (``metrics.flight``, ``metrics.flight_dump``): a rank's last minute kept, written
when an iteration, a gap or a step was slow against the engine's own past, or when asked.

Driven as the engines' patches drive it (``StepRecorder.begin``/``end``/``idle``), on the real clock:
the iterations are real busy spins of known length on this thread, which the recorder's own thread
samples. Each dump is read back from disk: ``anomaly.json``'s numbers against the spin that made them
(within 10%), the trace's iterations through ``rlprof summary``'s reader, the report's
``steps[].anomalies``, the ``/metrics`` counter. Live engines: tests/e2e/test_vllm_server_tp1.py and
test_sglang_server_tp1.py."""

import json
import logging
import re
import time
from pathlib import Path

import pytest

from rlprof_plugins.cli.command import main as rlprof
from rlprof_plugins.config.options import parse_options
from rlprof_plugins.errors import OptionsError
from rlprof_plugins.metrics.flight import REASONS
from rlprof_plugins.metrics.flight_dump import ANOMALY_FILE
from rlprof_plugins.step_logs.anomalies import read_anomalies
from rlprof_plugins.metrics.log import STATE_SUFFIX
from rlprof_plugins.metrics.record import RankTotals
from rlprof_plugins.metrics.recorder import StepRecorder
from rlprof_plugins.metrics.series import StepSeries
from rlprof_plugins.report.render.anomalies import add_anomalies
from rlprof_plugins.report.execute.passes import LocalPasses
from rlprof_plugins.report.plan.planner import plan_root
from rlprof_plugins.stages import IterationInfo
from rlprof_plugins.trace.analysis.trace_stats import trace_stats

DECODE = IterationInfo(prefill_tokens=0, decode_tokens=4, batch_size=4)
PREFILL = IterationInfo(prefill_tokens=40, decode_tokens=0, batch_size=1)
FAST = {"floor_ms": 20, "after_seconds": 0.2, "sample_hz": 50, "warmup_iterations": 5, "stall_seconds": 0.3}


def engine_work(seconds: float) -> None:
    """The engine's iteration: a busy spin the sampler sees by name."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def recorder(tmp_path: Path, step: int | None = 3, **settings) -> StepRecorder:
    r = StepRecorder(tmp_path, "rank0", parse_options({"flight_recorder": {**FAST, **settings}}))
    if step is not None:
        r.mark(step)
    return r


def iterate(r: StepRecorder, n: int, seconds: float = 0.003, info: IterationInfo = DECODE) -> None:
    for _ in range(n):
        r.begin()
        engine_work(seconds)
        r.end(info)


def dumps(root: Path, timeout: float = 5.0, at_least: int = 1) -> list[dict]:
    """The dumps below ``root`` once ``at_least`` are on disk (each step's and the stepless)."""
    deadline = time.time() + timeout
    while True:
        found = [a for d in [root, *root.glob("global_step_*")] for a in read_anomalies(d)]
        if len(found) >= at_least or time.time() > deadline:
            return found
        time.sleep(0.05)


def test_a_slow_iteration_is_written_with_its_length_its_baseline_and_its_stacks(tmp_path):
    r = recorder(tmp_path)
    iterate(r, 40)
    r.begin()
    began = time.perf_counter()
    engine_work(0.25)
    spun = time.perf_counter() - began
    r.end(DECODE)
    ended = time.time()
    iterate(r, 5)
    found = dumps(tmp_path)
    written = time.time()
    r.close()
    assert len(found) == 1, found
    a = found[0]
    assert a["reason"] == "slow_iteration" and a["stage"] == "decode" and a["global_step"] == 3
    assert abs(a["duration_ms"] - spun * 1e3) <= 0.1 * spun * 1e3, (a["duration_ms"], spun)
    assert 2.0 <= a["baseline_ms"] <= 10.0 and a["factor"] > 3
    assert Path(a["path"]).parent == tmp_path / "global_step_3" / "flight"
    assert written - ended < 5.0  # on disk within 5 s of the event's end
    assert a["ranks"]["rank0"]["trace"] == "rank0.flight.json"
    trace = Path(a["path"]) / "rank0.flight.json"
    stats = trace_stats(trace, "rank0", None)
    assert stats.error is None and stats.source == "rlprof"
    assert stats.iterations == 46  # every iteration the ring kept (all of them: under a minute)
    slowest = max(stats.iteration_list, key=lambda it: it[2])
    assert slowest[1] == "decode" and abs(slowest[2] / 1e3 - a["duration_ms"]) < 1.0
    events = json.loads(trace.read_text())["traceEvents"]
    sampled = {e["name"] for e in events if e.get("cat") == "python_sample"}
    assert any(name.endswith(": engine_work") for name in sampled), sampled
    assert stats.python_stacks == "sampled"


def test_warm_up_profiled_iterations_and_idle_gaps_never_trigger(tmp_path):
    r = recorder(tmp_path, warmup_iterations=10)
    iterate(r, 9, 0.003)
    iterate(r, 1, 0.1)  # a server's first iterations (compilation, caches)
    iterate(r, 20, 0.003)
    r.begin(profiled=True)  # a profiling session's iteration (the profiler's own cost in it)
    engine_work(0.1)
    r.end(DECODE)
    iterate(r, 20, 0.003)
    r.idle()  # the engine waits for work: the gap is no stall
    time.sleep(0.5)
    iterate(r, 20, 0.003)
    r.mark(4)  # a weight sync: the first iterations of the step
    iterate(r, 1, 0.1)
    iterate(r, 5, 0.003)
    time.sleep(0.6)
    assert dumps(tmp_path, timeout=0.5) == []
    r.close()


def test_a_gap_while_the_engine_is_busy_is_a_stall(tmp_path):
    r = recorder(tmp_path)
    iterate(r, 30)
    began = time.time()
    time.sleep(0.6)  # the engine did not say it waits for work: stopped, preempted, stuck between iterations
    r.begin()
    gap = time.time() - began
    engine_work(0.003)
    r.end(DECODE)
    found = dumps(tmp_path)
    r.close()
    assert [a["reason"] for a in found] == ["stall"], found
    assert abs(found[0]["duration_ms"] - gap * 1e3) <= 0.1 * gap * 1e3
    assert found[0]["baseline_ms"] == 300.0  # the limit it was held against


def test_an_rl_phase_between_iterations_is_the_trainers_time_not_a_stall(tmp_path):
    """A weight update that holds the engine thread past ``stall_seconds`` right after an iteration (the engine
    never said it waits for work): its phase tells the flight recorder, whether it is timed in the rank's own
    process (told as it starts, SGLang's scheduler) or delivered once done (vLLM's engine core to its workers),
    and no dump is written; a gap with no phase after it still is a stall."""
    from rlprof_plugins.metrics import phases

    r = recorder(tmp_path)
    iterate(r, 30)
    phases.timed(phases.WEIGHT_UPDATE, "update_weights_from_disk", lambda: time.sleep(0.6), r.phase,
                 starting=r.idle)
    iterate(r, 5)
    phases.timed(phases.WEIGHT_UPDATE, "collective_rpc:update_weights", lambda: time.sleep(0.6), r.phase)
    iterate(r, 5)
    time.sleep(0.5)  # past after_seconds: a dump would be on disk by now
    assert dumps(tmp_path, timeout=0.1, at_least=0) == []
    time.sleep(0.6)
    iterate(r, 1)
    found = dumps(tmp_path)
    r.close()
    assert [a["reason"] for a in found] == ["stall"], found


def test_steps_of_rl_phases_alone_are_no_baseline_for_a_slow_step(tmp_path):
    """Three steps of a trainer's calls and no iteration (weight syncs between rollouts) after three rollouts:
    the next rollout, several times as long, is still held against the rollouts (their median, not the phases'
    zero busy time) and dumped."""
    from rlprof_plugins.metrics import phases

    r = recorder(tmp_path, step=1, floor_ms=1000, min_interval_seconds=0.01)
    for step in (2, 3, 4):
        iterate(r, 20)
        r.mark(step)
    for step in (5, 6, 7):
        phases.timed(phases.WEIGHT_UPDATE, "update_weights_from_disk", lambda: None, r.phase)
        r.mark(step)
    iterate(r, 20, 0.02)  # step 7: the same iterations, each ~7x as long
    r.mark(8)
    found = dumps(tmp_path)
    r.close()
    assert [(a["reason"], a["global_step"]) for a in found] == [("slow_step", 7)], found
    steps = [json.loads(line) for line in (tmp_path / "steps" / "rank0.jsonl").read_text().splitlines()]
    assert [s["iterations"] for s in steps if s["global_step"] in (5, 6)] == [0, 0]  # written all the same


def test_a_long_prompt_among_short_ones_is_its_work_not_an_anomaly(tmp_path):
    """RL batches mix prompt lengths: a 4,000-token prefill after 40-token ones takes longer because it is
    larger (here 50x the time for 100x the tokens), and no dump is written."""
    r = recorder(tmp_path)
    iterate(r, 30, 0.004, PREFILL)
    r.begin()
    engine_work(0.2)
    r.end(IterationInfo(prefill_tokens=4000, decode_tokens=0, batch_size=1))
    iterate(r, 5, 0.004, PREFILL)
    time.sleep(0.5)  # past after_seconds: a dump would be on disk by now
    found = dumps(tmp_path, timeout=0.3)
    r.close()
    assert found == []


def test_prompts_of_varied_lengths_in_every_batch_never_trigger(tmp_path):
    """An RL-shaped mix: prefills of 6 to 1,500 tokens, each as long as its tokens make it (a fixed cost and
    a cost per token), in random order after a warm-up of short ones."""
    import random

    rng = random.Random(7)
    r = recorder(tmp_path)
    iterate(r, 20, 0.003, PREFILL)
    for _ in range(60):
        tokens = rng.choice([6, 40, 200, 700, 1500])
        r.begin()
        engine_work(0.002 + tokens * 0.00012)
        r.end(IterationInfo(prefill_tokens=tokens, decode_tokens=0, batch_size=1))
    time.sleep(0.5)
    found = dumps(tmp_path, timeout=0.3)
    r.close()
    assert found == []


def test_a_prefill_slow_for_its_work_is_written_with_what_its_work_predicted(tmp_path):
    """The same 40 tokens as every prefill before it, 50 times as long: slow for its work, dumped; the
    baseline is what the stage's past predicts for 40 tokens."""
    r = recorder(tmp_path)
    iterate(r, 30, 0.004, PREFILL)
    r.begin()
    began = time.perf_counter()
    engine_work(0.2)
    spun = time.perf_counter() - began
    r.end(PREFILL)
    found = dumps(tmp_path)
    r.close()
    assert [(a["reason"], a["stage"]) for a in found] == [("slow_iteration", "prefill")]
    assert abs(found[0]["duration_ms"] - spun * 1e3) <= 0.1 * spun * 1e3
    assert 3.0 <= found[0]["baseline_ms"] <= 12.0, found[0]  # ~4 ms: the stage's 40-token iterations


def test_the_work_fit_predicts_from_tokens_when_they_vary_and_in_proportion_when_they_do_not():
    from rlprof_plugins.metrics.flight import WorkFit

    fit = WorkFit()
    for _ in range(20):
        fit.add(40, 4_000_000)
    assert fit.predict(40) == 4_000_000
    assert fit.predict(10) == 4_000_000  # smaller than usual: held to the mean, never less
    assert fit.predict(4000) == 400_000_000  # larger than any seen: in proportion
    steep = WorkFit()
    for k in range(200):  # time rising faster than in proportion (long prompts' attention), past the window
        tokens = 100 + (k * 37) % 900
        steep.add(tokens, tokens * 200_000 - 10_000_000)
    assert steep.n == 64
    assert abs(steep.predict(3000) - (3000 * 200_000 - 10_000_000)) < 1_000  # the line, above the proportion
    assert steep.predict(3000) > steep.sy / steep.sx * 3000


def test_a_slow_step_against_the_steps_before_it(tmp_path):
    r = recorder(tmp_path, step=1, floor_ms=1000, min_interval_seconds=0.01)  # no iteration is slow alone
    for step in (2, 3, 4):
        iterate(r, 20)
        r.mark(step)
    began = time.perf_counter()
    iterate(r, 20, 0.02)  # step 4: the same iterations, each ~7x as long
    busy = time.perf_counter() - began
    r.mark(5)
    found = dumps(tmp_path)
    for step in (6, 7, 8):  # steps a session recorded: the profiler's cost is in them, never compared
        r.begin(profiled=True)
        engine_work(0.02)
        r.end(DECODE)
        iterate(r, 40, 0.02)
        r.mark(step)
    time.sleep(0.5)
    found = dumps(tmp_path)
    r.close()
    assert [a["reason"] for a in found] == ["slow_step"], found
    a = found[0]
    assert a["global_step"] == 4 and Path(a["path"]).parent == tmp_path / "global_step_4" / "flight"
    assert abs(a["duration_ms"] - busy * 1e3) <= 0.1 * busy * 1e3  # the step's busy time
    steps = [json.loads(line) for line in (tmp_path / "steps" / "rank0.jsonl").read_text().splitlines()]
    assert a["duration_ms"] == pytest.approx(next(s["busy_ms"] for s in steps if s["global_step"] == 4), abs=0.01)


def test_a_stall_and_the_slow_iteration_it_leaves_are_one_incident_in_one_dump(tmp_path):
    """A frozen engine (a gap while busy), then its first iteration slow as it recovers: one dump, the stall's,
    whose window holds the slow iteration too; a slow iteration after that window is an incident of its own."""
    r = recorder(tmp_path, after_seconds=0.5)
    iterate(r, 30)
    time.sleep(0.6)  # stopped between iterations
    iterate(r, 1, 0.1)  # the first iteration after it: slow (a stall, then a slow iteration)
    iterate(r, 5)
    dumps(tmp_path)
    time.sleep(1.0)  # past the stall's dump and any other the incident would have made
    found = dumps(tmp_path)
    assert [a["reason"] for a in found] == ["stall"], found
    trace = trace_stats(Path(found[0]["path"]) / "rank0.flight.json", "rank0", None)
    assert any(it[2] / 1e3 >= 90 for it in trace.iteration_list), trace.iteration_list  # the slow one is in it
    iterate(r, 1, 0.1)  # later: its own incident
    found = dumps(tmp_path, at_least=2)
    r.close()
    assert sorted(a["reason"] for a in found) == ["slow_iteration", "stall"], found


def test_each_reason_is_rate_limited_and_a_request_always_written(tmp_path):
    r = recorder(tmp_path, min_interval_seconds=60)
    iterate(r, 30)
    for _ in range(3):
        iterate(r, 1, 0.1)
        iterate(r, 10)
    r.flight_dump("20261127-000000-requested-001")
    found = dumps(tmp_path, at_least=2)
    r.close()
    assert sorted(a["reason"] for a in found) == ["requested", "slow_iteration"], found
    requested = next(a for a in found if a["reason"] == "requested")
    assert Path(requested["path"]).name == "20261127-000000-requested-001"
    state = RankTotals.decode((tmp_path / "steps" / f"rank0{STATE_SUFFIX}").read_text())
    assert state.anomalies == {"slow_iteration/decode": 1, "requested/all": 1}
    samples = {tuple(s.labels.values()): s.value for m in StepSeries(tmp_path).collect()
               if m.name == "rlprof_anomalies" for s in m.samples if s.name == "rlprof_anomalies_total"}
    assert samples == {("slow_iteration", "decode", "rank0"): 1, ("requested", "all", "rank0"): 1}


def test_two_ranks_write_one_event_into_one_folder(tmp_path):
    ranks = [StepRecorder(tmp_path, f"rank{k}", parse_options({"flight_recorder": FAST})) for k in (0, 1)]
    for r in ranks:
        r.mark(7)
        iterate(r, 30)
    for r in ranks:  # the same slow iteration, a few milliseconds apart (their collectives keep them together)
        iterate(r, 1, 0.1)
    found = dumps(tmp_path)
    time.sleep(0.5)
    found = dumps(tmp_path)
    for r in ranks:
        r.close()
    assert len(found) == 1, found
    assert sorted(found[0]["ranks"]) == ["rank0", "rank1"]
    assert sorted(p.name for p in Path(found[0]["path"]).glob("*.flight.json")) == ["rank0.flight.json",
                                                                                    "rank1.flight.json"]


def test_two_ranks_whose_clocks_differ_by_seconds_write_one_event_into_one_folder(tmp_path):
    """Ranks on two nodes: rank1's clock runs 5 s ahead of rank0's. Each names a folder by its own clock;
    the event is one folder all the same, found by the iteration both ranks counted."""
    ranks = [StepRecorder(tmp_path, f"rank{k}", parse_options({"flight_recorder": FAST})) for k in (0, 1)]
    ranks[1].flight._clock = lambda: time.time_ns() + 5_000_000_000
    for r in ranks:
        r.mark(7)
        iterate(r, 30)
    for r in ranks:
        iterate(r, 1, 0.1)
    time.sleep(0.8)
    found = dumps(tmp_path)
    for r in ranks:
        r.close()
    assert len(found) == 1, [(a["path"], sorted(a["ranks"])) for a in found]
    assert sorted(found[0]["ranks"]) == ["rank0", "rank1"]


def test_a_dump_that_cannot_be_written_is_one_line_and_serving_goes_on(tmp_path, caplog):
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")  # every write below it fails, as a full disk's would
    r = StepRecorder(blocked, "rank0", parse_options({"flight_recorder": FAST}))
    r.mark(2)
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        iterate(r, 30)
        iterate(r, 1, 0.1)
        iterate(r, 10)
        time.sleep(0.6)
    assert r.flight.failed is None and r.failed is None  # the recorder and the step metrics go on
    lines = [m for m in caplog.messages if "flight recorder dump (slow_iteration) not written" in m]
    assert len(lines) == 1, caplog.messages
    r.close()


def test_the_disk_budget_drops_a_dump_with_one_line(tmp_path, caplog):
    big = tmp_path / "global_step_1" / "flight" / "20260101-000000-requested"
    big.mkdir(parents=True)
    (big / "rank0.flight.json").write_bytes(b"x" * (2 << 20))
    r = recorder(tmp_path, disk_mb=1)
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        iterate(r, 30)
        iterate(r, 1, 0.1)
        time.sleep(0.6)
    r.close()
    assert len(dumps(tmp_path, timeout=0)) == 1  # the one there before
    assert any("dropped" in m and "flight_recorder.disk_mb" in m for m in caplog.messages), caplog.messages


def test_the_disk_budget_removes_the_oldest_automatic_dumps_first(tmp_path):
    """Routine dumps never crowd out later ones: a new dump removes the oldest automatic dumps to stay
    under disk_mb; a requested dump stays."""
    flight = tmp_path / "global_step_1" / "flight"
    old, newer, asked = (flight / "20260101-000000-slow_iteration", flight / "20260101-000100-stall",
                         flight / "20250101-000000-requested")
    for folder in (old, newer, asked):
        folder.mkdir(parents=True)
        (folder / "rank0.flight.json").write_bytes(b"x" * (400 << 10))
    r = recorder(tmp_path, disk_mb=1)
    iterate(r, 30)
    iterate(r, 1, 0.1)
    iterate(r, 5)
    found = dumps(tmp_path, at_least=4, timeout=3)
    r.close()
    names = sorted(Path(a["path"]).name for a in found)
    assert not old.exists() and newer.exists() and asked.exists(), names
    assert len(names) == 3 and any(n.endswith("-slow_iteration") and "global_step_3" in a["path"]
                                   for n, a in zip(names, sorted(found, key=lambda a: Path(a["path"]).name)))


def test_a_dump_dropped_for_want_of_room_is_counted_on_metrics(tmp_path):
    asked = tmp_path / "global_step_1" / "flight" / "20260101-000000-requested"
    asked.mkdir(parents=True)
    (asked / "rank0.flight.json").write_bytes(b"x" * (2 << 20))
    r = recorder(tmp_path, disk_mb=1)
    iterate(r, 30)
    iterate(r, 1, 0.1)
    time.sleep(0.6)
    r.close()
    samples = {tuple(s.labels.values()): s.value for m in StepSeries(tmp_path).collect()
               if m.name == "rlprof_anomalies_dropped" for s in m.samples}
    assert samples == {("slow_iteration", "rank0"): 1}, samples


def test_a_step_folder_of_dumps_alone_is_a_measured_step_for_report_and_summary(tmp_path, capsys):
    """What the defaults write where no session ran (a dump, step metrics) reads as measured: exit 0."""
    r = recorder(tmp_path, step=3)
    iterate(r, 30)
    iterate(r, 1, 0.15)
    iterate(r, 5)
    assert dumps(tmp_path)
    r.close()  # step 3 never finished: its folder holds the dump alone
    assert sorted(p.name for p in (tmp_path / "global_step_3").iterdir()) == ["flight"]
    out = tmp_path / "report.json"
    assert rlprof(["report", str(tmp_path), "-q", "--json", str(out), "-o", str(tmp_path / "report.html")]) == 0
    report = json.loads(out.read_text())
    row = next(row for row in report["steps"] if row["global_step"] == 3)
    assert [a["reason"] for a in row["anomalies"]] == ["slow_iteration"]
    assert not any("no rank trace" in n for n in report["notes"]), report["notes"]
    assert rlprof(["summary", str(tmp_path), "-q", "--json"]) == 0
    assert "no session recorded a trace here" in capsys.readouterr().err


def test_the_report_lists_each_dump_under_its_step(tmp_path):
    r = recorder(tmp_path, step=1)
    iterate(r, 30)
    r.mark(2)
    iterate(r, 10)
    iterate(r, 1, 0.15)
    iterate(r, 5)
    assert dumps(tmp_path)
    r.mark(3)
    r.close()
    out = tmp_path / "report.json"
    assert rlprof(["report", str(tmp_path), "-q", "--json", str(out), "-o", str(tmp_path / "report.html")]) == 0
    report = json.loads(out.read_text())
    rows = {row["global_step"]: row for row in report["steps"]}
    assert rows[2]["state"] == "measured" and [a["reason"] for a in rows[2]["anomalies"]] == ["slow_iteration"]
    assert rows[1]["anomalies"] == []
    assert any(re.match(r"step 2: anomaly: slow_iteration \(decode\) 1[5-9]\d\.\d ms against", n)
               for n in report["notes"]), report["notes"]  # the 150 ms spin, stretched by a busy host at most
    page = (tmp_path / "report.html").read_text()
    assert "id='anomalies-2'" in page and "data-anomalies=1" in page and "dump 1: the window" in page
    from tests.helpers.browser import open_page  # as a reader sees it: headless Chromium, network off

    opened = open_page(tmp_path / "report.html", screenshot=tmp_path / "anomalies.png")
    assert opened.console_errors == [] and opened.blocked == []
    assert "anomalies-2" in opened.details and opened.marks.get("timeline", 0) >= 40  # a bar per iteration kept
    assert any("anomaly: slow_iteration" in n for n in opened.notes)


def test_settings_are_checked_at_start_up_naming_the_key():
    assert parse_options({}).flight_recorder["seconds"] == 60  # on by default (docs/performance.md)
    assert parse_options({"flight_recorder": False}).flight_recorder is None
    for bad, key in (({"flight_recorder": {"slow_fctor": 2}}, "flight_recorder.slow_fctor"),
                     ({"flight_recorder": {"slow_factor": 1}}, "flight_recorder.slow_factor"),
                     ({"flight_recorder": {"seconds": 0}}, "flight_recorder.seconds"),
                     ({"flight_recorder": {"sample_hz": 1000}}, "flight_recorder.sample_hz"),
                     ({"flight_recorder": "on"}, "flight_recorder"),
                     ({"flight_recorder": True, "step_metrics": False}, "flight_recorder")):
        with pytest.raises(OptionsError) as e:
            parse_options(bad)
        assert e.value.key == key, (bad, e.value)


def test_a_dump_whose_file_cannot_be_read_is_listed_with_why(tmp_path):
    r = recorder(tmp_path, step=5)
    iterate(r, 30)
    r.flight_dump("20261127-000000-requested-002")
    (found,) = dumps(tmp_path)
    r.close()
    assert found["reason"] in REASONS
    (Path(found["path"]) / ANOMALY_FILE).write_text("{torn")
    (Path(found["path"]) / "rank0.flight.json").write_text('{"traceEvents": [{"ph": "X"')
    row = {"global_step": 5}
    view = plan_root(tmp_path, use_cache=False)
    add_anomalies(row, view, view.servers[0].anomalies, LocalPasses(tmp_path, use_cache=False))
    (listed,) = row["anomalies"]
    assert listed["reason"] == "requested" and listed["error"].startswith("JSONDecodeError")  # named by its folder
    assert listed["window_iterations"] == 0 and row["_anomaly_views"][0]["errors"], row


def test_keep_last_steps_takes_a_step_of_dumps_alone_with_the_others(tmp_path):
    from rlprof_plugins.store import manifest, retention
    from rlprof_plugins.store.layout import step_folders

    for step in (1, 3):
        (tmp_path / f"global_step_{step}").mkdir()
        (tmp_path / f"global_step_{step}" / manifest.MANIFEST).write_text(json.dumps({"state": "done"}))
    r = recorder(tmp_path, step=2)
    iterate(r, 30)
    r.flight_dump(None)
    dumps(tmp_path)
    r.close()
    recording = tmp_path / "global_step_4"  # a session still writing: kept, as before
    recording.mkdir()
    (recording / manifest.MANIFEST).write_text(json.dumps({"state": "recording"}))
    retention.discard(retention.prune(tmp_path, 1))
    assert [s for s, _ in step_folders(tmp_path)] == [4], "step 2's dumps alone were never complete"


def test_a_failing_flight_recorder_stops_alone_and_the_step_metrics_go_on(tmp_path, caplog):
    r = recorder(tmp_path, step=1)
    iterate(r, 5)

    def broken(info):
        raise RuntimeError("a bug in the ring")

    r.flight.end = broken
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        iterate(r, 5)
    assert r.flight is None and r.failed is None  # the recorder is off; the step metrics are not
    assert r.flight_dump(None) == {"ok": True, "flight_recorder": False}
    r.mark(2)
    r.close()
    records = [json.loads(line) for line in (tmp_path / "steps" / "rank0.jsonl").read_text().splitlines()]
    assert [(x["global_step"], x["iterations"]) for x in records] == [(1, 10)]
    assert sum("flight recorder stopped on rank0: RuntimeError: a bug in the ring" in m for m in caplog.messages) == 1


def test_a_requested_folder_is_only_ever_a_name_below_the_step(tmp_path):
    r = recorder(tmp_path, step=1)
    iterate(r, 30)
    r.flight_dump("../../escaped")  # a hand-made command: never a path
    (found,) = dumps(tmp_path)
    r.close()
    assert Path(found["path"]).parent == tmp_path / "global_step_1" / "flight"
    assert not (tmp_path.parent / "escaped").exists() and not (tmp_path / "escaped").exists()


def test_making_room_reads_the_ledger_and_touches_only_what_it_removes(tmp_path, monkeypatch):
    """The dumps' sizes come from the ledger (``flight_ledger``), rebuilt once by a walk where it is missing;
    after that, making room walks no step folder, removes the oldest automatic dumps until the rest fit, forgets
    a dump removed by something else (retention) when it comes to it, and never removes a requested one."""
    from rlprof_plugins.metrics import flight_dump
    from rlprof_plugins.metrics.flight_dump import ledger_entry
    from rlprof_plugins.metrics.flight_ledger import DumpLedger

    folders = []
    for step, name in ((1, "20260101-000000-requested"), (2, "20260101-000100-slow_iteration"),
                       (3, "20260101-000200-stall"), (4, "20260101-000300-slow_step"),
                       (5, "20260101-000400-slow_iteration")):
        folder = tmp_path / f"global_step_{step}" / "flight" / name
        folder.mkdir(parents=True)
        (folder / "rank0.flight.json").write_bytes(b"x" * (300 << 10))
        folders.append(folder)
    walks = []
    ledger = DumpLedger(tmp_path, lambda: walks.append(1) or flight_dump.ledger_entries(tmp_path))
    assert ledger.make_room(2 << 20) == 5 * (300 << 10) and walks == [1]  # under budget: nothing removed
    # from here on no walk: a step folder listed would fail the test
    monkeypatch.setattr(flight_dump, "flight_folders", lambda root: pytest.fail("walked the step folders"))
    import shutil
    shutil.rmtree(tmp_path / "global_step_2")  # retention removed step 2 with its dump
    ledger.written(ledger_entry(folders[4]))  # a rank re-measured the newest dump: the same bytes
    used = ledger.make_room(3 * (300 << 10) + 1)
    assert used == 3 * (300 << 10) and walks == [1]
    assert [f.exists() for f in folders] == [True, False, False, True, True]  # step 2 gone, step 3 removed
    entries = json.loads((tmp_path / "steps" / ".flight-dumps.json").read_text())
    assert sorted(Path(e["folder"]).name for e in entries) == sorted(f.name for f in (folders[0], *folders[3:]))
    assert ledger.make_room(1) == 300 << 10 and folders[0].exists()  # a requested dump stays, whatever the budget


def test_the_sampled_spans_come_out_in_start_order_parents_first():
    """A dump's stack spans are written as they open (no sort): in start order, each parent before its
    children, a span closing where its frame left the stack or the iteration changed."""
    from rlprof_plugins.metrics.flight import StackSample
    from rlprof_plugins.metrics.flight_dump import sample_spans

    def code(name):
        namespace = {}
        exec(f"def {name}(): pass", namespace)
        return namespace[name].__code__

    main, step, forward, sample = code("main"), code("step"), code("forward"), code("sample")
    samples = [StackSample(1_000, (main, step, forward), 1), StackSample(2_000, (main, step, forward), 1),
               StackSample(3_000, (main, step, sample), 1), StackSample(4_000, (main, step), 2),
               StackSample(5_000, (main,), None)]
    spans = [(e["name"].split()[-1], e["ts"], e["dur"], e["args"]["depth"], e["args"]["samples"],
              e["args"].get("iteration")) for e in sample_spans(samples, 0, 1, 1)]
    assert spans == [("main", 1.0, 3.0, 0, 3, 1), ("step", 1.0, 3.0, 1, 3, 1), ("forward", 1.0, 2.0, 2, 2, 1),
                     ("sample", 3.0, 1.0, 2, 1, 1), ("main", 4.0, 1.0, 0, 1, 2), ("step", 4.0, 1.0, 1, 1, 2),
                     ("main", 5.0, 0.0, 0, 1, None)]
    assert [s[1] for s in spans] == sorted(s[1] for s in spans)
