"""The GPU kit's self-test (``examples/rlprof_selftest``) on this machine's CPU, end to end: ``python -m
rlprof_selftest`` over the installed package, then its step folder read back.

The memory part needs a device allocator: it runs here with the allocator
stand-in (tests/stand_ins/cuda_memory) fed by the self-test model's decode.
What only a GPU shows (CUDA-graph decode, kernels, flows) is reported
skipped on CPU, which the first test checks it says.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys

import pytest

from tests.helpers.installed import REPO

KIT = REPO / "examples"  # the self-test's package sits here, as it sits in the kit folder beside gpu_check.py
if str(KIT) not in sys.path:
    sys.path.append(str(KIT))

import rlprof_selftest as selftest  # noqa: E402
from rlprof_selftest.model import TinyEngine  # noqa: E402
from tests.helpers.traces import iteration_indices, load_trace  # noqa: E402
from tests.stand_ins.cuda_memory import AllocatorStandIn  # noqa: E402


def kit_env() -> dict[str, str]:
    """The environment gpu_check.py gives the self-test: its package's folder on the path."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(KIT), os.environ.get("PYTHONPATH")) if p)}


def test_the_self_test_profiles_the_model_and_says_what_works(tmp_path):
    run = subprocess.run([sys.executable, "-m", "rlprof_selftest", "--device", "cpu", "--out", str(tmp_path),
                          "--decode", "6", "--json"], capture_output=True, text=True, timeout=300, env=kit_env())
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout)
    states = {p["name"]: p["state"] for p in result["parts"]}
    assert states == {"CUDA graph decode": "skipped", "session start": "ok", "recording and export": "ok",
                      "stage traces": "ok", "chunks, stitched": "ok", "pauses marked in the trace": "ok",
                      "rlprof check": "ok", "kernels and flow events": "skipped", "memory snapshot": "skipped",
                      "rlprof summary": "ok", "rlprof report": "ok", "kernels in every iteration": "skipped",
                      "memory snapshot in torch's viewer": "skipped", "merged trace checked": "ok",
                      "device time in the report": "skipped", "a rollout recorded by rlprof's default": "ok"}
    assert result["ok"] and result["device"] == "cpu"
    assert "cpu" in next(p["detail"] for p in result["parts"] if p["name"] == "memory snapshot")
    for cost in ("iteration, not profiled", "iteration, recording", "pauses on the engine thread",
                 "export (exporter thread)", "trace size", "a rollout, recorded"):
        assert result["costs"][cost]
    # the rollout's three ways, each named with its ratio to the unrecorded rollout
    assert re.fullmatch(r"rlprof's default \d+\.\d\dx of unrecorded, torch's own profiler \(stacks off\) \d+\.\d\dx; "
                        r"after the rollout, the serving thread \d+\.\d\d s against \d+\.\d\d s",
                        result["costs"]["a rollout, recorded"]), result["costs"]["a rollout, recorded"]
    step = tmp_path / "global_step_0"
    manifest = json.loads((step / "manifest.json").read_text())
    assert manifest["state"] == "done" and manifest["engine"] == "selftest"
    decode = load_trace(next((step / "decode").glob("*.pt.trace.json.gz")))
    prefill = load_trace(next((step / "prefill").glob("*.pt.trace.json.gz")))
    # 3 rounds of 1 prefill + 6 decodes: prefill at 0, 7, 14
    assert iteration_indices(prefill) == [0, 7, 14]
    assert iteration_indices(decode) == [i for i in range(21) if i % 7]
    assert (tmp_path / "report.html").stat().st_size > 0


def test_the_memory_part_reads_back_the_snapshot(tmp_path, monkeypatch):
    allocator = AllocatorStandIn()
    decode = TinyEngine.decode

    def allocating_decode(engine):  # the stand-in allocator sees what a device allocator would
        allocator.free(allocator.malloc(2 << 20))
        allocator.malloc(1 << 16)
        decode(engine)

    monkeypatch.setattr(TinyEngine, "decode", allocating_decode)
    result = selftest.run("cpu", tmp_path, decode=3, rounds=2, allocator=lambda: allocator, memory=True)
    parts = {p.name: p for p in result.parts}
    assert result.ok, [vars(p) for p in result.parts]
    assert parts["memory snapshot"].state == "ok"
    assert parts["memory snapshot in torch's viewer"].state == "ok"  # torch's own _memory_viz reads it
    assert "pauses marked in the trace" in parts and parts["pauses marked in the trace"].state == "ok"
    snapshot = pickle.loads((tmp_path / "global_step_0" / "memory" / "rank0.pickle").read_bytes())
    allocs = [e for e in snapshot["device_traces"][0] if e["action"] == "alloc"]
    assert len(allocs) == 2 * 2 * 3  # warm-up and the unprofiled run are outside the window
    assert "memory snapshot" in result.costs and "dump" in result.costs["memory snapshot"]


def test_a_device_this_host_lacks_is_named():
    with pytest.raises(LookupError, match="--device cuda: no such device here"):
        selftest.resolve_device("cuda")
    bad = subprocess.run([sys.executable, "-m", "rlprof_selftest", "--device", "cuda"], capture_output=True,
                         text=True, timeout=120, env=kit_env())
    assert bad.returncode == 2 and "--device cuda: no such device here" in bad.stderr


def test_kernels_are_counted_in_the_iteration_that_launched_them(tmp_path):
    """A CUDA-shaped trace: a kernel belongs to the iteration whose runtime call (same correlation id)
    started in it, wherever the device ran it; a replayed graph's kernels carry its launch's id."""
    import gzip
    import json

    from rlprof_selftest.proof import kernels_per_iteration

    def x(name, ts, dur, cat="cpu_op", **args):
        return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 1, "tid": 1, "args": args}

    events = [x("rlprof::iteration 0 [prefill] prefill_tokens=8 decode_tokens=0 batch=1", 0, 100),
              x("cudaLaunchKernel", 10, 5, "cuda_runtime", correlation=1),
              x("cudaLaunchKernel", 20, 5, "cuda_runtime", correlation=2),
              x("rlprof::iteration 1 [decode] prefill_tokens=0 decode_tokens=1 batch=1", 200, 100),
              x("cudaGraphLaunch", 210, 5, "cuda_runtime", correlation=3),
              x("rlprof::iteration 2 [decode] prefill_tokens=0 decode_tokens=1 batch=1", 400, 100),
              x("gemm", 150, 50, "kernel", correlation=1),  # runs after its iteration ended: still its own
              x("gemv", 160, 5, "kernel", correlation=2),
              x("graph_gemv", 230, 5, "kernel", correlation=3), x("graph_add", 240, 5, "kernel", correlation=3),
              x("orphan", 600, 5, "kernel", correlation=99)]
    path = tmp_path / "t.pt.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)
    assert kernels_per_iteration(path) == [2, 2, 0]
