"""Chunked recording (``chunk_iterations``): the same content as one torch
session, in one trace per rank, with torch's stop paid per chunk. Driven with
the real torch.profiler backend; assertions parse the written traces."""

import gzip
import json
from pathlib import Path

import pytest
import torch

from rlprof_plugins.backends.torch_profiler import TorchProfilerBackend, TorchSettings
from rlprof_plugins.cli.command import main as rlprof
from rlprof_plugins.session.chunks import CHUNK_DIR
from rlprof_plugins.trace.format.check import check
from rlprof_plugins.trace.rewrite.stitch import CHUNK_KEY, stitch
from tests.helpers.traces import iteration_indices, iteration_stages, load_trace, ops_in_iterations, python_frames
from tests.unit.test_session import DECODE, PREFILL, make_controller, settle, start


def workload(ctl, n: int, infos=(PREFILL, DECODE, DECODE)) -> None:
    """The same operators every iteration, so two sessions over it can be compared op by op."""
    x = torch.ones(8, 8)
    for k in range(n):
        ctl.begin_iteration(infos[k % len(infos)])
        for _ in range(3):
            x = torch.relu(x @ x / 8)
        torch.add(x, 1)
        ctl.end_iteration()


def stacks_backend(table, overrides=None):
    return TorchProfilerBackend(TorchSettings(with_stack=True))


def record(tmp_path: Path, step: int, chunk: int, n: int = 7, **kw) -> tuple[dict, Path]:
    ctl = make_controller(tmp_path, stacks_backend)
    assert start(ctl, global_step=step, step_end=n, chunk_iterations=chunk, **kw)["ok"]
    workload(ctl, n)
    status = settle(ctl, step)
    ctl.shutdown()
    return status, tmp_path / f"global_step_{step}"


def test_a_chunked_session_records_what_one_session_records(tmp_path):
    plain, plain_dir = record(tmp_path, 1, chunk=0)
    chunked, chunked_dir = record(tmp_path, 2, chunk=2)
    assert plain["state"] == chunked["state"] == "done", (plain, chunked)
    assert (plain["stops"], chunked["stops"]) == (1, 4)  # 7 iterations in chunks of 2: 2+2+2+1
    assert chunked["longest_stop_seconds"] <= chunked["stop_seconds"]
    (plain_file,), (chunked_file,) = plain["files"], chunked["files"]  # one trace per rank either way
    a, b = load_trace(Path(plain_file)), load_trace(Path(chunked_file))
    assert iteration_indices(a) == iteration_indices(b) == list(range(7))
    assert ops_in_iterations(a) == ops_in_iterations(b) and all(ops_in_iterations(b).values())
    assert python_frames(b) > 0 and python_frames(b) >= python_frames(a) * 0.8  # stacks in every chunk
    assert [c["source"] for c in json.loads(gzip.open(chunked_file).read())[CHUNK_KEY]] and len(
        json.loads(gzip.open(chunked_file).read())[CHUNK_KEY]) == 4
    # a timeline that runs on: every iteration after the one before it
    starts = sorted((int(e["name"].split()[1]), e["ts"]) for e in b["traceEvents"]
                    if str(e.get("name", "")).startswith("rlprof::iteration") and e.get("ph") == "X")
    assert [ts for _, ts in starts] == sorted(ts for _, ts in starts)
    report = check(Path(chunked_file))
    assert report.ok, report.errors
    assert not (chunked_dir / CHUNK_DIR).exists()  # the chunks are gone once joined
    manifest = json.loads((chunked_dir / "manifest.json").read_text())
    assert manifest["state"] == "done" and manifest["writers"]["rank0"]["stops"] == 4


def test_chunks_split_by_stage_like_a_plain_session(tmp_path):
    status, folder = record(tmp_path, 3, chunk=3, by_stage=True)
    assert status["state"] == "done", status
    stages = {Path(f).parent.name: load_trace(Path(f)) for f in status["files"]}
    assert sorted(stages) == ["decode", "prefill"]
    assert iteration_stages(stages["prefill"]) == {0: "prefill", 3: "prefill", 6: "prefill"}
    assert iteration_stages(stages["decode"]) == {k: "decode" for k in (1, 2, 4, 5)}


def test_a_failed_stitch_keeps_the_chunks_and_says_how_to_finish(tmp_path, monkeypatch):
    from rlprof_plugins.session import chunks

    def broken(paths, out, pauses):
        raise RuntimeError("no space left on device")

    monkeypatch.setattr(chunks, "stitch_in_subprocess", broken)
    status, folder = record(tmp_path, 4, chunk=2, n=5)
    assert status["state"] == "failed" and "stitching 3 chunks failed" in status["error"], status
    kept = [Path(f) for f in status["files"]]
    assert len(kept) == 3 and all(p.exists() and p.parent.name == CHUNK_DIR for p in kept)
    assert "rlprof stitch" in status["error"]
    # the command it names finishes the job
    out = tmp_path / "finished.pt.trace.json.gz"
    assert rlprof(["stitch", *map(str, sorted(kept)), "-o", str(out), "--quiet"]) == 0
    assert iteration_indices(load_trace(out)) == list(range(5))


def test_a_stitching_child_that_hangs_fails_within_its_bound_and_keeps_the_chunks(tmp_path, monkeypatch):
    """Every wait ends: the child that stitches a session's chunks gets a bound from their size; one that
    never finishes (here a child that sleeps past it) fails the session with the chunks kept and the
    command that finishes the job, instead of holding up the stop that waits for it."""
    from rlprof_plugins import _child
    from rlprof_plugins.trace.rewrite import stitch as stitch_module

    monkeypatch.setattr(_child, "BASE_SECONDS", 1.0)
    real = _child.run_in_child

    def hanging(target, *args, **kwargs):
        assert kwargs["timeout"] >= 1.0, kwargs  # the bound is passed
        return real("time:sleep", 30, what=kwargs["what"], timeout=kwargs["timeout"])

    monkeypatch.setattr(stitch_module, "run_in_child", hanging)
    status, folder = record(tmp_path, 4, chunk=2, n=5)
    assert status["state"] == "failed" and "did not finish within" in status["error"], status
    kept = [Path(f) for f in status["files"]]
    assert len(kept) == 3 and all(p.exists() for p in kept) and "rlprof stitch" in status["error"]


def test_stitch_moves_each_chunk_onto_the_first_clock_and_keeps_ids_apart(tmp_path):
    def chunk(path: Path, base_ns: int, first_iteration: int) -> Path:
        events = [
            {"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "python"}},
            {"ph": "X", "cat": "user_annotation", "name": f"rlprof::iteration {first_iteration}", "pid": 7,
             "tid": 1, "ts": 10.0, "dur": 5.0},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 1, "ts": 11.0, "dur": 1.0,
             "args": {"External id": 3, "Python id": 1}},
            {"ph": "s", "cat": "ac2g", "name": "launch", "id": 3, "pid": 7, "tid": 1, "ts": 11.5},
        ]
        path.write_text(json.dumps({"baseTimeNanoseconds": base_ns, "traceEvents": events}))
        return path

    a = chunk(tmp_path / "a.json", 1_000_000_000, 0)
    b = chunk(tmp_path / "b.json", 1_000_250_000, 1)  # 250 us later
    result = stitch([a, b], tmp_path / "out.pt.trace.json.gz")
    out = load_trace(result.output)
    assert result.chunks == 2 and out["baseTimeNanoseconds"] == 1_000_000_000
    names = [e for e in out["traceEvents"] if e["ph"] == "M"]
    assert len(names) == 1  # repeated process metadata written once
    iters = {e["name"]: e["ts"] for e in out["traceEvents"] if e["name"].startswith("rlprof::iteration")}
    assert iters == {"rlprof::iteration 0": 10.0, "rlprof::iteration 1": pytest.approx(260.0)}
    ids = [e["id"] for e in out["traceEvents"] if e["ph"] == "s"]
    externals = [e["args"]["External id"] for e in out["traceEvents"] if e.get("cat") == "cpu_op"]
    assert len(set(ids)) == 2 and len(set(externals)) == 2 and ids == externals


def test_a_failure_while_recording_keeps_the_chunks_recorded_before_it(tmp_path):
    made = []

    class NoStart(TorchProfilerBackend):
        def start(self):
            raise RuntimeError("Kineto could not start")

    def factory(table, overrides=None):  # the third chunk's profiler cannot start
        made.append(1)
        return (NoStart if len(made) == 3 else TorchProfilerBackend)(TorchSettings(with_stack=True))

    ctl = make_controller(tmp_path, factory)
    assert start(ctl, global_step=5, step_end=9, chunk_iterations=2)["ok"]
    workload(ctl, 9)
    ctl.shutdown()  # waits for the exporter
    status = ctl.handle({"op": "status", "global_step": 5})["session"]
    assert status["state"] == "failed" and "Kineto could not start" in status["error"], status
    kept = [Path(f) for f in status["files"]]
    assert len(kept) == 2 and all(p.exists() and p.parent.name == CHUNK_DIR for p in kept)  # iterations 0-3
    assert "rlprof stitch" in status["error"]
    manifest = json.loads((tmp_path / "global_step_5" / "manifest.json").read_text())
    assert manifest["state"] == "failed" and len(manifest["files"]) == 2
    out = tmp_path / "joined.pt.trace.json.gz"
    assert rlprof(["stitch", *map(str, kept), "-o", str(out), "--quiet"]) == 0
    assert iteration_indices(load_trace(out)) == [0, 1, 2, 3]
