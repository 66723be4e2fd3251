"""``rlprof selftest`` on this machine's CPU, end to end: the installed command, then its step folder read back.

The memory part needs a device allocator: it runs here with the allocator
stand-in (tests/stand_ins/cuda_memory) fed by the self-test model's decode.
What only a GPU shows (CUDA-graph decode, kernels, flows) is reported
skipped on CPU, which the first test checks it says.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from rlprof_plugins.cli import selftest
from rlprof_plugins.cli.common import CliError
from rlprof_plugins.cli.selftest_model import TinyEngine
from tests.helpers.traces import iteration_indices, load_trace
from tests.stand_ins.cuda_memory import AllocatorStandIn

RLPROF = Path(sys.executable).with_name("rlprof")


def test_the_installed_command_profiles_the_model_and_says_what_works(tmp_path):
    run = subprocess.run([str(RLPROF), "selftest", "--device", "cpu", "--out", str(tmp_path), "--decode", "6",
                          "--json"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout)
    states = {p["name"]: p["state"] for p in result["parts"]}
    assert states == {"CUDA graph decode": "skipped", "session start": "ok", "recording and export": "ok",
                      "stage traces": "ok", "chunks, stitched": "ok", "pauses marked in the trace": "ok",
                      "rlprof check": "ok", "kernels and flow events": "skipped", "memory snapshot": "skipped",
                      "rlprof summary": "ok", "rlprof report": "ok"}
    assert result["ok"] and result["device"] == "cpu"
    assert "cpu" in next(p["detail"] for p in result["parts"] if p["name"] == "memory snapshot")
    for cost in ("iteration, not profiled", "iteration, recording", "pauses on the engine thread",
                 "export (exporter thread)", "trace size"):
        assert result["costs"][cost]
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
    assert "pauses marked in the trace" in parts and parts["pauses marked in the trace"].state == "ok"
    snapshot = pickle.loads((tmp_path / "global_step_0" / "memory" / "rank0.pickle").read_bytes())
    allocs = [e for e in snapshot["device_traces"][0] if e["action"] == "alloc"]
    assert len(allocs) == 2 * 2 * 3  # warm-up and the unprofiled run are outside the window
    assert "memory snapshot" in result.costs and "dump" in result.costs["memory snapshot"]


def test_a_device_this_host_lacks_is_named():
    with pytest.raises(CliError, match="--device cuda: no such device here"):
        selftest.resolve_device("cuda")
