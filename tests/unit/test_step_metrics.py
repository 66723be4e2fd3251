"""Always-on step metrics (the ``metrics`` room): the typed step record and its codec, the engine
thread's aggregates, the per-rank JSON lines written off that thread, torn lines and restarts, the one
engine hook, and the report's rows for steps measured and not traced. The clock is the real one; the
iterations are real sleeps of known length."""

import json
import threading
import time
from pathlib import Path

import pytest

from rlprof_plugins.cli.command import main as rlprof
from rlprof_plugins.config.options import parse_options
from rlprof_plugins.errors import OptionsError
from rlprof_plugins.metrics.engine_hook import RecorderPlace, StepMetricsHook
from rlprof_plugins.metrics.log import StepLog
from rlprof_plugins.step_logs.steps import measured_numbers, quantile_ms, read_steps
from rlprof_plugins.metrics.record import BUCKETS_MS, NotARecord, RankTotals, StageRecord, StepRecord
from rlprof_plugins.metrics.recorder import recorder_for
from rlprof_plugins.metrics.timer import StepMetrics
from rlprof_plugins.stages import IterationInfo

PREFILL = IterationInfo(prefill_tokens=12, decode_tokens=0, batch_size=1)
DECODE = IterationInfo(prefill_tokens=0, decode_tokens=4, batch_size=4)


def run(recorder, infos, ms: float = 2.0) -> None:
    for info in infos:
        recorder.begin()
        time.sleep(ms / 1000)
        recorder.end(info)


def record(step, rank="rank0", step_source="request", started_at=1.0, ended_at=2.0, iterations=1, busy_ms=1.0,
           idle_ms=0.0, stages=None) -> StepRecord:
    return StepRecord(global_step=step, step_source=step_source, rank=rank, started_at=started_at, ended_at=ended_at,
                      iterations=iterations, busy_ms=busy_ms, idle_ms=idle_ms, stages=stages or {})


def test_the_record_is_one_json_line_read_back_whole_and_a_torn_one_is_refused():
    counts = [0] * len(BUCKETS_MS)
    counts[2] = 3
    r = record(7, stages={"decode": StageRecord(3, 4.5, 2.0, 0, 12, 12, counts)})
    line = r.encode()
    assert line.endswith("\n") and "\n" not in line[:-1]
    assert json.loads(line) == {"global_step": 7, "step_source": "request", "rank": "rank0", "started_at": 1.0,
                                "ended_at": 2.0, "iterations": 1, "busy_ms": 1.0, "idle_ms": 0.0,
                                "stages": {"decode": {"iterations": 3, "total_ms": 4.5, "max_ms": 2.0,
                                                      "prefill_tokens": 0, "decode_tokens": 12, "batch_sum": 12,
                                                      "counts": counts}}}
    assert StepRecord.decode(line) == r
    for torn in (line[:-20], '{"global_step": 3, "rank": "ra', "[]", '{"rank": "rank0"}',
                 line.replace('"global_step":7', '"global_step":"7"'),
                 line.replace('"iterations":1,', '"iterations":"one",')):
        with pytest.raises(NotARecord):
            StepRecord.decode(torn)
    both = r.combine(record(7, started_at=0.5, ended_at=3.0, iterations=2, busy_ms=2.0,
                            stages={"decode": StageRecord(1, 5.0, 5.0, 0, 4, 4, counts)}))
    assert (both.iterations, both.busy_ms, both.started_at, both.ended_at) == (3, 3.0, 0.5, 3.0)
    assert (both.stages["decode"].iterations, both.stages["decode"].max_ms, both.stages["decode"].counts[2]) == (4, 5.0, 6)
    assert r.stages["decode"].iterations == 3  # combining leaves both parts as they were


def test_a_ranks_totals_round_trip_through_its_state_file():
    totals = RankTotals("rank1", global_step=5)
    totals.add(record(4, rank="rank1", stages={"prefill": StageRecord(1, 3.0, 3.0, 12, 0, 1)}))
    again = RankTotals.decode(totals.encode())
    assert (again.rank, again.global_step, again.last_step, again.steps) == ("rank1", 5, 4, 1)
    assert again.stages["prefill"].prefill_tokens == 12 and again.stages["prefill"].total_ms == 3.0
    with pytest.raises(NotARecord):
        RankTotals.decode('{"global_step": 1}')


def test_one_hook_builds_a_recorder_once_per_owner_and_answers_step_commands(tmp_path):
    class Owner:
        pass

    located = []

    def locate(owner, rank):
        located.append(rank)
        return RecorderPlace(str(tmp_path), rank, parse_options({}))

    hook = StepMetricsHook("test", locate)
    owner = Owner()
    rec = hook.recorder(owner, "rank3")
    assert rec is hook.recorder(owner, "rank3") and located == ["rank3"]
    assert hook.command(owner, {"op": "status"}, "rank3") is None  # a profiling command: not the hook's
    assert hook.command(owner, {"op": "mark_step", "global_step": 6}, "rank3") == {
        "ok": True, "step_metrics": True, "global_step": 6}
    hook.started(owner, {"op": "start", "global_step": 8}, {"ok": False}, "rank3")  # refused: the step stays
    assert rec.metrics.step == 6
    hook.started(owner, {"op": "start", "global_step": 8}, {"ok": True}, "rank3")
    assert rec.metrics.step == 8
    off = StepMetricsHook("test", lambda owner: None)
    assert off.recorder(Owner()) is None
    assert off.command(Owner(), {"op": "mark_step", "global_step": 1}) == {"ok": True, "step_metrics": False}

    def broken(owner):
        raise RuntimeError("no config here")

    assert StepMetricsHook("test", broken).recorder(Owner()) is None  # a warning, never into the engine
    rec.close()


def test_each_step_is_one_record_of_its_stages_tokens_and_times():
    records = []
    m = StepMetrics("rank0", records.append)
    m.set_step(3, "request")
    elapsed_ms = []  # each iteration as this test timed it around the recorder's own begin and end
    for info in (PREFILL, DECODE, DECODE, DECODE):
        t0 = time.perf_counter()
        m.begin()
        time.sleep(0.002)
        m.end(info)
        elapsed_ms.append((time.perf_counter() - t0) * 1e3)
    m.set_step(4, "weight_version")  # step 3 is finished
    (r,) = records
    assert (r.global_step, r.step_source, r.rank, r.iterations) == (3, "request", "rank0", 4)
    decode = r.stages["decode"]
    assert (decode.iterations, decode.decode_tokens, decode.batch_sum) == (3, 12, 12)
    # a sleep lasts at least its 2 ms; the recorder's times lie inside the test's own (however busy the host)
    assert 6.0 <= decode.total_ms <= sum(elapsed_ms[1:]) and decode.max_ms >= 2.0 and sum(decode.counts) == 3
    assert r.stages["prefill"].prefill_tokens == 12 and r.busy_ms >= 8.0 and r.idle_ms >= 0
    m.set_step(5, "weight_version")  # nothing ran in step 4: no record
    assert len(records) == 1


def test_the_log_appends_off_the_engine_thread_and_reads_back_past_a_torn_line(tmp_path):
    log = StepLog(tmp_path / "steps", "rank0")
    writer_threads = set()
    real_append = log.lines.append

    def spy(line):
        writer_threads.add(threading.current_thread().name)
        real_append(line)

    log.lines.append = spy
    for step in (1, 2):
        log.put(record(step, started_at=1.0, ended_at=2.0, iterations=1, busy_ms=1.0))
    log.close()
    assert writer_threads == {"rlprof-step-log-rank0"}
    path = tmp_path / "steps" / "rank0.jsonl"
    with path.open("a") as f:
        f.write('{"global_step": 3, "rank": "ra')  # a crash mid-write
    records, warnings = read_steps(tmp_path)
    assert sorted(records) == [1, 2] and len(warnings) == 1 and "rank0.jsonl:3" in warnings[0]
    again = StepLog(tmp_path / "steps", "rank0")  # a restarted server appends
    again.put(record(2, started_at=3.0, ended_at=4.0, iterations=2, busy_ms=2.0, idle_ms=1.0))
    again.close()
    records, _ = read_steps(tmp_path)
    assert records[2]["rank0"].iterations == 3 and records[2]["rank0"].ended_at == 4.0  # combined


def test_a_full_log_rotates_once_so_the_folder_stays_bounded(tmp_path):
    log = StepLog(tmp_path, "rank0", max_bytes=400)
    for step in range(20):
        log.put(record(step, step_source="x" * 50))
    log.close()
    sizes = sorted(p.stat().st_size for p in tmp_path.glob("rank0.jsonl*"))
    assert len(sizes) == 2 and max(sizes) <= 400  # the log and its one rotation; beside them the state file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0.jsonl", "rank0.jsonl.1", "rank0.state.json"]


def test_percentiles_from_the_buckets_and_the_slowest_rank():
    counts = [0] * len(BUCKETS_MS)
    counts[3] = 9  # nine iterations in (2, 4] ms
    counts[6] = 1  # one in (16, 32]
    assert quantile_ms(counts, 0.5, largest=20.0) == 4.0 and quantile_ms(counts, 0.95, largest=20.0) == 20.0
    stage = dict(iterations=10, total_ms=50.0, max_ms=20.0, prefill_tokens=0, decode_tokens=40, batch_sum=40,
                 counts=counts)
    ranks = {"rank0": record(1, busy_ms=50.0, stages={"decode": StageRecord(**stage)}),
             "rank1": record(1, rank="rank1", busy_ms=40.0, stages={"decode": StageRecord(**{**stage, "total_ms": 40.0})})}
    n = measured_numbers(ranks)
    assert n["stages"]["decode"]["mean_ms"] == 5.0 and n["imbalance"] == 1.25 and n["straggler"]["rank"] == "rank0"
    assert n["stages"]["decode"]["mean_batch"] == 4.0


def test_a_measured_steps_slowest_rank_is_a_rank_that_ran():
    """Data-parallel ranks take turns being slow: rank0's prefill is slow, rank1's decode. The step is rank0's
    (120 ms in iterations against 100): its stages add up to its 120 ms, its percentiles are its own
    histogram's, and each stage names its own slowest rank beside it. Summing each stage's slowest would give
    190 ms, a step no rank ran; percentiles over both histograms would describe neither."""
    def stage(total, n, bucket):
        counts = [0] * len(BUCKETS_MS)
        counts[bucket] = n
        return StageRecord(n, total, total / n, 0, n, n, counts)

    ranks = {"rank0": record(1, busy_ms=120.0, stages={"prefill": stage(100.0, 2, 7), "decode": stage(20.0, 10, 1)}),
             "rank1": record(1, rank="rank1", busy_ms=100.0,
                             stages={"prefill": stage(10.0, 2, 3), "decode": stage(90.0, 10, 5)})}
    n = measured_numbers(ranks)
    assert n["slowest_rank"] == "rank0" and n["iteration_ms_total"] == 120.0 and n["iterations"] == 12
    decode, prefill = n["stages"]["decode"], n["stages"]["prefill"]
    assert decode["total_ms"] == 20.0 and decode["p90_ms"] == BUCKETS_MS[1] and decode["max_ms"] == 2.0
    assert decode["slowest_rank"] == "rank1" and decode["slowest_rank_total_ms"] == 90.0
    assert prefill["total_ms"] == 100.0 and prefill["slowest_rank"] == "rank0"
    assert n["straggler"]["rank"] == "rank0"


@pytest.mark.parametrize("value", [0, "yes", None])
def test_the_key_is_validated(value):
    with pytest.raises(OptionsError) as e:
        parse_options({"step_metrics": value})
    assert e.value.key == "step_metrics"


def test_recorder_follows_starts_and_the_weight_version(tmp_path):
    assert recorder_for(str(tmp_path), "rank0", parse_options({"step_metrics": False})) is None
    assert recorder_for(None, "rank0", parse_options({})) is None
    rec = recorder_for(str(tmp_path), "rank0", parse_options({"step_source": "weight_version"}))
    rec.weight_version("default")  # not an integer: no step yet
    run(rec, [DECODE])
    for version in ("1", "1", "2"):
        rec.weight_version(version)  # version v is step v + 1 (trainer_step_offset)
        run(rec, [PREFILL, DECODE])
    rec.started(9)
    run(rec, [DECODE])
    rec.close()
    records, _ = read_steps(tmp_path)
    assert {step: r["rank0"].iterations for step, r in records.items()} == {None: 1, 2: 4, 3: 2, 9: 1}
    assert records[2]["rank0"].step_source == "weight_version" and records[9]["rank0"].step_source == "request"


def test_the_report_gives_every_measured_step_a_row(tmp_path):
    # rank1 30x rank0's sleep: a sleep only ever overruns, and under load rank0's 1 ms ran past 1.5 ms (a 3 ms
    # rank1 then read imbalance <= 1.5): at 30 ms, rank0 would need 20 ms more an iteration
    for rank, ms in (("rank0", 1.0), ("rank1", 30.0)):
        rec = recorder_for(str(tmp_path), rank, parse_options({}))
        for step in (1, 2, 3):
            rec.started(step)
            run(rec, [PREFILL, DECODE, DECODE], ms=ms)
        rec.close()
    out = tmp_path.parent / "measured.json"
    assert rlprof(["report", str(tmp_path), "-q", "--json", str(out), "--csv", str(tmp_path.parent / "csv")]) == 0
    data = json.loads(out.read_text())
    assert [(s["global_step"], s["state"], s["traced"]) for s in data["steps"]] == [
        (1, "measured", False), (2, "measured", False), (3, "measured", False)]
    assert all(s["stages"]["decode"]["iterations"] == 2 for s in data["steps"])
    assert all(s["straggler"]["rank"] == "rank1" and s["imbalance"] > 1.5 for s in data["steps"])
    page = (tmp_path / "report.html").read_text()
    assert page.count("metrics only") == 3 and page.count("rank1 (by busy time)") == 3
    steps_csv = (tmp_path.parent / "csv" / "steps.csv").read_text().splitlines()
    assert sum(1 for line in steps_csv if ",decode," in line) == 3
    assert Path(data["steps"][0]["directory"]).name == "steps"


def test_the_series_read_the_state_files_and_count_every_finished_step(tmp_path):
    """What a scrape of /metrics shows, read from the ranks' state files (prometheus_client's own text
    format, parsed back by its own parser): the step now, and the finished steps' histogram and tokens."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from rlprof_plugins.metrics.series import register

    for rank in ("rank0", "rank1"):
        rec = recorder_for(str(tmp_path), rank, parse_options({}))
        rec.started(4)
        run(rec, [PREFILL, DECODE, DECODE], ms=1.0)
        rec.started(5)  # step 4 finished; 5 is open and has run nothing yet
        rec.log.close()
    registry = CollectorRegistry()
    register(tmp_path, registry)
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(generate_latest(registry).decode())
               for s in family.samples}
    for rank in ("rank0", "rank1"):
        assert samples[("rlprof_global_step", (("rank", rank),))] == 4  # the newest finished step
        assert samples[("rlprof_current_step", (("rank", rank),))] == 5
        assert samples[("rlprof_iteration_seconds_count", (("rank", rank), ("stage", "decode")))] == 2
        assert samples[("rlprof_iteration_seconds_bucket", (("le", "+Inf"), ("rank", rank), ("stage", "decode")))] == 2
        assert samples[("rlprof_iteration_seconds_sum", (("rank", rank), ("stage", "decode")))] >= 0.002
        assert samples[("rlprof_tokens_total", (("kind", "generated"), ("rank", rank), ("stage", "decode")))] == 8
        assert samples[("rlprof_tokens_total", (("kind", "prompt"), ("rank", rank), ("stage", "prefill")))] == 12
        assert samples[("rlprof_steps_total", (("rank", rank),))] == 1
        # the finished step's tail, from its batches (tests/unit/test_rollout_tail.py holds its definition)
        assert samples[("rlprof_rollout_tail_seconds", (("rank", rank),))] >= 0
        assert 0 <= samples[("rlprof_rollout_tail_ratio", (("rank", rank),))] <= 1
    assert not any("global_step=" in str(labels) for _, labels in samples)  # no label per step


def test_reading_again_reads_only_what_the_logs_gained_and_gives_the_same_numbers(tmp_path):
    """The report's incremental reader (``measured_incrementally``) against a whole read, after appends:
    a new step, a rank's late line of a recent step, a torn line; a rotation reads everything again.
    The reader gives the steps the new lines touched; the caller keeps the others."""
    from rlprof_plugins.step_logs.steps import measured_incrementally

    def put(rank: str, step: int, busy: float) -> None:
        with (tmp_path / "steps" / f"{rank}.jsonl").open("a") as f:
            f.write(record(step, rank=rank, busy_ms=busy, stages={
                "decode": StageRecord(2, busy, busy / 2, 0, 8, 8, [0] * len(BUCKETS_MS))}).encode())

    def whole() -> dict:
        records, _ = read_steps(tmp_path)
        return {step: measured_numbers(ranks) for step, ranks in records.items()}

    kept: dict = {}

    def again(state):
        numbers, warnings, state, everything = measured_incrementally(tmp_path, state)
        if everything:
            kept.clear()
        kept.update(numbers)
        return numbers, warnings, json.loads(json.dumps(state)), everything

    (tmp_path / "steps").mkdir()
    for step in (1, 2, 3):
        put("rank0", step, 10.0 + step)
        put("rank1", step, 20.0 + step)
    numbers, warnings, state, everything = again(None)
    assert everything and kept == whole() and not warnings
    put("rank0", 4, 14.0)  # step 4 on one rank so far
    numbers, _, state, everything = again(state)
    assert not everything and sorted(numbers) == [4]  # only the step the new line touched
    assert kept == whole() and kept[4]["ranks"] == ["rank0"]
    assert len(json.dumps(state)) < 4000  # offsets and the newest steps' records, not every step's numbers
    put("rank1", 4, 40.0)  # its other rank's line, later
    with (tmp_path / "steps" / "rank1.jsonl").open("a") as f:
        f.write('{"global_step": 5, "rank": "ra')  # being written
    numbers, warnings, state, everything = again(state)
    assert not everything and kept == whole() and kept[4]["straggler"]["rank"] == "rank1"
    assert len(warnings) == 1 and "not whole" in warnings[0]
    numbers, warnings, state, everything = again(state)  # nothing new
    assert numbers == {} and not everything and kept == whole()
    (tmp_path / "steps" / "rank0.jsonl").rename(tmp_path / "steps" / "rank0.jsonl.1")  # rotated
    put("rank0", 5, 15.0)
    numbers, _, _, everything = again(state)
    assert everything
    assert {s: n["iterations"] for s, n in kept.items()} == {s: n["iterations"] for s, n in whole().items()}

@pytest.mark.parametrize("block", [64, 1 << 16])
def test_the_logs_are_read_side_by_side_with_the_numbers_of_a_whole_read(tmp_path, monkeypatch, block):
    """Each rank's log lists its steps in order, so the reader reads the logs side by side, a block at a
    time (cut mid-line here at 64 bytes), holding a step's records, not every step's: rotated logs, a step
    recorded in two parts (a restart), a step some ranks lack, a line with no step, a blank and a torn
    line give the numbers and warnings of a whole read (``read_steps``); a log whose steps go back is
    read whole, with the same numbers; one more step appended is read alone."""
    from rlprof_plugins.step_logs import steps as reader

    monkeypatch.setattr(reader, "BLOCK", block)
    steps = tmp_path / "steps"
    steps.mkdir()

    def line(step, rank, busy):
        return record(step, rank=rank, busy_ms=busy, stages={
            "decode": StageRecord(2, busy, busy / 2, 0, 8, 8, [0] * len(BUCKETS_MS))}).encode()

    logs = {rank: [line(s, rank, 10.0 + s + k) for s in range(1, 41) if not (rank == "rank2" and s % 7 == 0)]
            for k, rank in enumerate(("rank0", "rank1", "rank2"))}
    logs["rank1"].insert(12, line(12, "rank1", 3.0))  # step 12's second part: a restart inside it
    logs["rank0"].insert(0, line(None, "rank0", 1.0))
    logs["rank2"].insert(5, "\n")
    for rank, lines in logs.items():
        if rank != "rank2":  # rotated: the older half in <rank>.jsonl.1
            (steps / f"{rank}.jsonl.1").write_text("".join(lines[:20]))
        (steps / f"{rank}.jsonl").write_text("".join(lines[20:] if rank != "rank2" else lines)
                                             + ('{"global_step": 41, "ra' if rank == "rank1" else ""))

    def whole() -> tuple[dict, list]:
        records, warnings = read_steps(tmp_path)
        return {s: measured_numbers(r) for s, r in records.items()}, warnings

    numbers, warnings, state, everything = reader.measured_incrementally(tmp_path, None)
    expected, expected_warnings = whole()
    assert everything and numbers == expected and sorted(k for k in numbers if k is not None) == list(range(1, 41))
    assert numbers[None]["ranks"] == ["rank0"]  # the line with no step: a step of its own in both reads
    assert numbers[12]["stages"]["decode"]["iterations"] == 4 and numbers[14]["ranks"] == ["rank0", "rank1"]
    # a whole read calls the line being written torn; the reader leaves it for next time and says so last
    assert warnings[:-1] == [w for w in expected_warnings if "rank1.jsonl:" not in w]
    assert "rank2.jsonl:6: not a whole step record" in warnings[0]
    assert "rank1.jsonl: its last line is not whole" in warnings[-1]
    with (steps / "rank0.jsonl").open("a") as f:  # one more step everywhere
        f.write(line(41, "rank0", 60.0))
    with (steps / "rank2.jsonl").open("a") as f:
        f.write(line(41, "rank2", 61.0))
    again, _, state, everything = reader.measured_incrementally(tmp_path, json.loads(json.dumps(state)))
    assert not everything and sorted(again) == [41] and again[41] == whole()[0][41]
    with (steps / "rank2.jsonl").open("a") as f:  # a line that goes back to step 3: that log is read whole
        f.write(line(3, "rank2", 99.0))
    numbers, _, _, everything = reader.measured_incrementally(tmp_path, None)
    assert everything and numbers == whole()[0] and numbers[3]["straggler"]["rank"] == "rank2"
