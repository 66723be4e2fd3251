"""Traces that show what the engine did (issue 32): the profiler's own pauses
marked, iterations HolisticTraceAnalysis can find, Kineto's invalid JSON
repaired, a finished recovery saying done, retention before done.

Driven with the real torch.profiler backend through the controller, as an
engine drives it; assertions parse the written files."""

import gzip
import json
import logging
import os
import shutil
import threading
import time
from pathlib import Path

import pytest
import torch

from rlprof_plugins.cli.command import main as rlprof
from rlprof_plugins.session.chunks import CHUNK_DIR
from rlprof_plugins.store import manifest, retention
from rlprof_plugins.store.layout import step_folders
from rlprof_plugins.trace.format.check import check
from rlprof_plugins.trace.format.pauses import PAUSE_NAME, Pause, with_pauses
from rlprof_plugins.trace.format.reader import TraceReader
from rlprof_plugins.trace.format.repair import repair_lines
from rlprof_plugins.report.render.summary import summarise
from tests.helpers.traces import (iteration_indices, iteration_stages, load_trace, pause_events, profiler_steps)
from tests.unit.test_chunks import record, workload
from tests.unit.test_session import make_controller, settle, start

# written by Kineto itself (vLLM 0.32's own profiler, TP=2), in Kineto's one-key-per-line layout
KINETO_WRITTEN = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-0.32-cpu-tp2-native"
QUOTED = 'torch/_export/passes/_node_metadata_hook.py(0): "cuda.version"'


# ---- the profiler's pauses ---------------------------------------------------------------------
def test_every_stop_is_a_pause_event_on_the_engine_thread(tmp_path):
    status, folder = record(tmp_path, 1, chunk=3, n=8)  # 3 + 3 + 2: two rotations and the final stop
    assert status["state"] == "done" and status["stops"] == 3, status
    trace = load_trace(Path(status["files"][0]))
    pauses = pause_events(trace)
    assert len(pauses) == status["stops"]
    assert [p["args"]["cause"] for p in pauses] == ["rotation", "rotation", "stop"]
    assert [(p["args"]["first_iteration"], p["args"]["last_iteration"], p["args"]["iterations"]) for p in pauses] == [
        (0, 2, 3), (3, 5, 3), (6, 7, 2)]
    engine = threading.get_native_id()
    assert {(p["pid"], p["tid"]) for p in pauses} == {(os.getpid(), engine)}
    # each pause lies between the iteration before it and the one after it, and lasts about as long as the stop
    starts = {int(e["name"].split()[1]): e for e in trace["traceEvents"]
              if str(e.get("name", "")).startswith("rlprof::iteration") and e["ph"] == "X"}
    for p, (before, after) in zip(pauses, ((2, 3), (5, 6), (7, None))):
        assert starts[before]["ts"] + starts[before]["dur"] <= p["ts"] + 1
        if after is not None:
            assert p["ts"] + p["dur"] <= starts[after]["ts"] + 1
    assert sum(p["dur"] for p in pauses) >= status["stop_seconds"] * 1e6 * 0.9
    assert check(Path(status["files"][0])).ok


def test_one_session_marks_its_final_stop_and_the_summary_counts_pauses_apart(tmp_path):
    status, folder = record(tmp_path, 2, chunk=0, n=4)
    trace = load_trace(Path(status["files"][0]))
    (pause,) = pause_events(trace)
    idle = pause["args"].pop("idle_ms")  # one torch session: no plan sized it, so none priced its stop
    assert pause["args"] == {"cause": "stop", "first_iteration": 0, "last_iteration": 3, "iterations": 4}
    assert idle >= 0
    summary = summarise(folder)
    stages = summary["steps"][0]["stages"]
    assert [st["stage"] for st in stages] == ["decode", "prefill"]  # the iterations say their stage
    assert sum(rank["iterations"] for st in stages for rank in st["ranks"]) == 4
    for stage in stages:
        (rank,) = stage["ranks"]
        assert rank["profiler_pauses"] == stage["profiler_pauses"] == 1
        assert rank["profiler_pause_ms"] == pytest.approx(pause["dur"] / 1000.0, abs=0.01)
        assert PAUSE_NAME not in [op["name"] for op in stage["top_cpu_ops"]]


def test_by_stage_puts_each_pause_with_the_stage_of_the_iteration_before_it(tmp_path):
    status, folder = record(tmp_path, 3, chunk=3, n=7, by_stage=True)  # iterations 0, 3, 6 prefill
    assert status["state"] == "done", status
    stages = {Path(f).parent.name: load_trace(Path(f)) for f in status["files"]}
    causes = {stage: [(p["args"]["cause"], p["args"]["last_iteration"]) for p in pause_events(t)]
              for stage, t in stages.items()}
    # chunks end after iterations 2 (decode), 5 (decode) and 6 (prefill, the final stop)
    assert causes == {"decode": [("rotation", 2), ("rotation", 5)], "prefill": [("stop", 6)]}
    assert iteration_stages(stages["prefill"]) == {0: "prefill", 3: "prefill", 6: "prefill"}


def test_merged_trace_counts_each_ranks_pauses(tmp_path):
    status, folder = record(tmp_path, 4, chunk=2, n=5)
    assert rlprof(["merge", str(folder), "--quiet"]) == 0
    merged = load_trace(folder / "merged" / "merged.pt.trace.json.gz")
    (rank,) = merged["rlprof_merge"]["ranks"]
    assert rank["rlprof_pauses"]["count"] == 3 == len(pause_events(merged))


def test_pauses_go_into_a_kineto_file_without_parsing_it(tmp_path):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.ones(4, 4).sum()
    raw = tmp_path / "raw.json"
    prof.export_chrome_trace(str(raw))
    base = json.loads(raw.read_text())["baseTimeNanoseconds"]
    pause = Pause("stop", base + 5_000_000, base + 7_500_000, 11, 12, 0, 9)
    out = tmp_path / "out.json"
    out.write_bytes(b"".join(with_pauses(raw, [pause])))
    data = json.loads(out.read_text())
    assert data["traceEvents"][0] == {**pause.event(base), "ts": 5000.0, "dur": 2500.0}
    assert data["traceEvents"][1:] == json.loads(raw.read_text())["traceEvents"]


# ---- iterations HTA can find -------------------------------------------------------------------
def test_every_iteration_is_also_a_profiler_step_inside_it(tmp_path):
    status, folder = record(tmp_path, 5, chunk=2, n=5)
    trace = load_trace(Path(status["files"][0]))
    assert profiler_steps(trace) == iteration_indices(trace) == [0, 1, 2, 3, 4]
    ours = {int(e["name"].split()[1]): e for e in trace["traceEvents"]
            if str(e.get("name", "")).startswith("rlprof::iteration") and e["ph"] == "X"}
    for e in trace["traceEvents"]:
        if str(e.get("name", "")).startswith("ProfilerStep#") and e["ph"] == "X":
            it = ours[int(e["name"][len("ProfilerStep#"):])]
            assert it["ts"] <= e["ts"] and e["ts"] + e["dur"] <= it["ts"] + it["dur"] and e["tid"] == it["tid"]


def test_stage_traces_keep_their_profiler_steps(tmp_path):
    status, folder = record(tmp_path, 6, chunk=0, n=6, by_stage=True)
    stages = {Path(f).parent.name: load_trace(Path(f)) for f in status["files"]}
    assert profiler_steps(stages["prefill"]) == [0, 3] and profiler_steps(stages["decode"]) == [1, 2, 4, 5]


# ---- Kineto's invalid JSON ----------------------------------------------------------------------
def kineto_with_quoted_frame(tmp_path: Path) -> tuple[Path, int]:
    """A real Kineto trace (stacks on) whose first Python frame name carries bare quotes."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True) as prof:
        (torch.ones(8, 8) @ torch.ones(8, 8)).sum()
    raw = tmp_path / "kineto.json"
    prof.export_chrome_trace(str(raw))
    text = raw.read_text()
    events = len(json.loads(text)["traceEvents"])
    lines = text.splitlines(keepends=True)
    k = next(i for i, line in enumerate(lines) if '"python_function"' in line)
    name = next(i for i in range(k, k + 4) if lines[i].lstrip().startswith('"name": '))
    lines[name] = lines[name].replace('"name": "', f'"name": "{QUOTED} ', 1)
    raw.write_text("".join(lines))
    with pytest.raises(ValueError):
        json.loads(raw.read_text())  # what Kineto wrote is not JSON
    return raw, events


def test_the_reader_repairs_bare_quotes_and_says_so_once(tmp_path, caplog):
    raw, count = kineto_with_quoted_frame(tmp_path)
    shutil.copy(raw, tmp_path / "second.json")
    (tmp_path / "second.json").write_text(raw.read_text().replace('"name": "aten::', f'"name": "{QUOTED} aten::'))
    for path in (raw, tmp_path / "second.json"):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="rlprof"), TraceReader(path) as reader:
            events = list(reader.events())
        assert len(events) == count
        assert any(str(e.get("name", "")).startswith(QUOTED) for e in events)
        warned = [r for r in caplog.records if "repaired invalid JSON" in r.getMessage()]
        assert len(warned) == 1 and str(path) in warned[0].getMessage()
        assert reader.repaired_events >= 1


def test_the_exporters_copy_repairs_kinetos_lines(tmp_path):
    raw, count = kineto_with_quoted_frame(tmp_path)
    fixed = json.loads(b"".join(repair_lines(iter([raw.read_bytes()[k:k + 700]
                                                   for k in range(0, raw.stat().st_size, 700)]))))
    assert len(fixed["traceEvents"]) == count and any(e["name"].startswith(QUOTED) for e in fixed["traceEvents"])
    valid = tmp_path / "valid.json"
    valid.write_text(json.dumps({"traceEvents": [{"name": 'say "hi"', "ph": "X"}]}, indent=2))
    assert b"".join(repair_lines(iter([valid.read_bytes()]))) == valid.read_bytes()  # escaped already: unchanged


def test_merge_of_a_trace_with_planted_quotes_keeps_the_event(tmp_path):
    folder = tmp_path / "global_step_3"
    shutil.copytree(KINETO_WRITTEN, folder)
    rank0 = next(folder.rglob("rank0.*.pt.trace.json.gz"))
    text = gzip.open(rank0, "rt").read()
    planted = text.replace('"name": "aten::slice"', f'"name": "{QUOTED} aten::slice"', 1)
    assert planted != text
    with gzip.open(rank0, "wt") as f:
        f.write(planted)
    out = tmp_path / "merged.pt.trace.json.gz"
    assert rlprof(["merge", str(rank0), str(next(folder.rglob("rank1.*.pt.trace.json.gz"))), "-o", str(out),
                   "--quiet"]) == 0
    merged = load_trace(out)
    assert [e["name"] for e in merged["traceEvents"] if str(e.get("name", "")).startswith(QUOTED)] == [
        f"{QUOTED} aten::slice"]
    assert check(out).ok


# ---- a finished recovery says done ----------------------------------------------------------------
def test_stitching_kept_chunks_makes_the_step_done(tmp_path, monkeypatch):
    from rlprof_plugins.session import chunks

    def broken(paths, out, pauses):
        raise RuntimeError("no space left on device")

    monkeypatch.setattr(chunks, "stitch_in_subprocess", broken)
    status, folder = record(tmp_path, 7, chunk=2, n=5)
    assert status["state"] == "failed"
    command = status["error"].split("finish it with: ")[1]
    argv = command.split()[1:]
    assert rlprof(argv + ["--quiet"]) == 0
    m = json.loads((folder / "manifest.json").read_text())
    section = m["writers"]["rank0"]
    assert m["state"] == "done" and section["state"] == "done" and section["error"] is None
    assert section["recovered"]["by"].startswith("rlprof stitch ") and "no space left" in section["recovered"]["error"]
    (listed,) = m["files"]
    trace = load_trace(folder / listed["path"])
    assert iteration_indices(trace) == list(range(5)) and len(pause_events(trace)) == 3  # kept with the chunks
    assert not list((folder / CHUNK_DIR).glob("*.json*"))  # the chunks and their pauses, removed


def test_a_failed_recovery_leaves_the_step_failed(tmp_path, monkeypatch):
    from rlprof_plugins.session import chunks

    monkeypatch.setattr(chunks, "stitch_in_subprocess", lambda paths, out, pauses: (_ for _ in ()).throw(
        RuntimeError("disk full")))
    status, folder = record(tmp_path, 8, chunk=2, n=4)
    kept = [Path(f) for f in status["files"]]
    kept[1].write_bytes(b"{ not json")  # one chunk damaged since
    assert rlprof(["stitch", *map(str, kept), "-o", str(folder / "ranks" / "x.pt.trace.json.gz"), "--quiet"]) == 1
    m = json.loads((folder / "manifest.json").read_text())
    assert m["state"] == "failed" and "recovered" not in m["writers"]["rank0"]
    assert all(p.exists() for p in kept)


def test_split_stages_finishes_a_kept_whole_trace(tmp_path, monkeypatch):
    from rlprof_plugins.backends import torch_profiler

    monkeypatch.setattr(torch_profiler, "split_in_subprocess", lambda *a, **k: (_ for _ in ()).throw(
        RuntimeError("killed")))
    status, folder = record(tmp_path, 9, chunk=0, n=3, by_stage=True)
    assert status["state"] == "failed" and "rlprof split-stages" in status["error"]
    command = status["error"].split("finish it with: ")[1]
    monkeypatch.undo()
    import shlex

    assert rlprof(shlex.split(command)[1:] + ["--quiet"]) == 0
    m = json.loads((folder / "manifest.json").read_text())
    assert m["state"] == "done" and sorted(f["stage"] for f in m["files"]) == ["all", "decode", "prefill"]


# ---- retention before done, the lock takeover ------------------------------------------------------
def test_done_is_reported_after_retention(tmp_path):
    ctl = make_controller(tmp_path)
    seen = []
    for step in (1, 2, 3, 4, 5):
        assert start(ctl, global_step=step, step_end=1, keep_last_steps=2)["ok"]
        workload(ctl, 1)
        status = settle(ctl, step)
        assert status["state"] == "done"
        seen.append([s for s, _ in step_folders(tmp_path)])
    assert seen == [[1], [1, 2], [2, 3], [3, 4], [4, 5]]
    ctl.shutdown()
    for t in threading.enumerate():
        if t.name == "rlprof-finalize":
            t.join(30)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["global_step_4", "global_step_5"]


def test_prune_moves_aside_then_discard_removes(tmp_path):
    for step in (1, 2):
        d = tmp_path / f"global_step_{step}"
        d.mkdir()
        (d / manifest.MANIFEST).write_text(json.dumps({"state": "done"}))
    moved = retention.prune(tmp_path, 1)
    assert [s for s, _ in step_folders(tmp_path)] == [2] and all(p.exists() for p in moved)
    retention.discard(moved)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["global_step_2"]


def test_what_a_killed_pruner_left_behind_goes_with_the_next_prune(tmp_path):
    for step in (1, 2, 3):
        d = tmp_path / f"global_step_{step}"
        d.mkdir()
        (d / manifest.MANIFEST).write_text(json.dumps({"state": "done"}))
    first = retention.prune(tmp_path, 2)  # moved aside, then the process "dies" before discard
    assert [p.name.split(".")[2] for p in first] == ["global_step_1"]
    remover = json.loads((first[0] / retention.REMOVER).read_text())
    assert remover["pid"] == os.getpid()
    dead = subprocess_pid()
    (first[0] / retention.REMOVER).write_text(json.dumps({**remover, "pid": dead, "started": None}))
    running = tmp_path / f"{retention.REMOVING}global_step_0.{os.getpid()}"  # a live pruner's, mid-way
    running.mkdir()
    (running / retention.REMOVER).write_text(json.dumps(remover))
    unknown = tmp_path / f"{retention.REMOVING}global_step_9.1"  # no record: not ours to judge
    unknown.mkdir()
    second = retention.prune(tmp_path, 1)
    assert sorted(p.name.split(".")[2] for p in second) == ["global_step_1", "global_step_2"]
    retention.discard(second)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["global_step_3", running.name, unknown.name])


def subprocess_pid() -> int:
    """A pid that no process holds any more."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_second_waiter_never_removes_a_new_holders_lock(tmp_path, monkeypatch):
    monkeypatch.setattr(manifest, "STALE_LOCK_S", 0.2)
    lock = tmp_path / manifest.LOCK_DIR
    lock.mkdir()
    os.utime(lock, (time.time() - 10, time.time() - 10))
    stale = lock.stat()  # what both waiters saw
    manifest._take_over(lock, stale)  # the first takes over...
    lock.mkdir()  # ...and a new holder takes the lock
    manifest._take_over(lock, stale)  # the second acts on what it saw before
    assert lock.is_dir()
    os.utime(lock, (time.time() - 10, time.time() - 10))
    manifest._take_over(lock, lock.stat())  # the new holder's, once stale itself, is taken over
    assert not lock.exists() and not (tmp_path / (manifest.LOCK_DIR + ".takeover")).exists()
