"""Stage splitting rules on a small trace in Kineto's shape (a CUDA-like one:
the CPU-only traces of the end-to-end tests have no kernels or GPU flows)."""

import gzip
import json

import pytest

from rlprof_plugins.trace.rewrite import stage_split

PID, GPU = 100, 0


def X(name, ts, dur, pid=PID, tid=1, cat="cpu_op", **args):
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "cat": cat, "args": args}


def trace():
    events = [
        {"ph": "M", "name": "process_name", "pid": PID, "args": {"name": "worker"}},
        X("rlprof::iteration 0 [prefill] prefill_tokens=9 decode_tokens=0 batch=1", 100, 50, cat="user_annotation"),
        X("aten::mm", 110, 10),
        X("cudaLaunchKernel", 120, 2, cat="cuda_runtime", correlation=7),
        {"ph": "s", "id": 7, "cat": "ac2g", "name": "ac2g", "ts": 120, "pid": PID, "tid": 1},
        X("rlprof::iteration 1 [decode] prefill_tokens=0 decode_tokens=3 batch=3", 200, 40, cat="user_annotation"),
        X("cudaLaunchKernel", 210, 2, cat="cuda_runtime", correlation=8),
        X("aten::add", 215, 5, tid=2),  # another thread of the worker, inside iteration 1
        X("idle_between", 170, 5),  # outside every iteration: dropped
        # kernels run after their host range closed: placed by correlation
        X("gemm_kernel", 160, 30, pid=GPU, tid=7, cat="kernel", correlation=7),
        {"ph": "f", "id": 7, "cat": "ac2g", "name": "ac2g", "ts": 160, "pid": GPU, "tid": 7, "bp": "e"},
        X("decode_kernel", 245, 10, pid=GPU, tid=7, cat="kernel", correlation=8),
    ]
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0}], "traceEvents": events}


def names(t):
    return sorted(e["name"] for e in t["traceEvents"] if e.get("ph") != "M")


def test_events_go_to_their_iterations_stage():
    parts = stage_split.split(trace())
    assert names(parts["prefill"]) == sorted([
        "rlprof::iteration 0 [prefill] prefill_tokens=9 decode_tokens=0 batch=1",
        "aten::mm", "cudaLaunchKernel", "ac2g", "gemm_kernel", "ac2g"])
    assert names(parts["decode"]) == sorted([
        "rlprof::iteration 1 [decode] prefill_tokens=0 decode_tokens=3 batch=3",
        "cudaLaunchKernel", "aten::add", "decode_kernel"])


def test_metadata_and_header_in_every_part():
    for stage, part in stage_split.split(trace()).items():
        assert part["deviceProperties"] == [{"id": 0}] and part["rlprof_stage"] == stage
        assert any(e.get("ph") == "M" for e in part["traceEvents"])


def test_flow_pairs_stay_together():
    prefill = stage_split.split(trace())["prefill"]["traceEvents"]
    flows = [e["ph"] for e in prefill if e.get("cat") == "ac2g"]
    assert sorted(flows) == ["f", "s"]


def test_trace_without_stage_annotations_is_refused():
    t = trace()
    t["traceEvents"] = [e for e in t["traceEvents"] if "rlprof" not in e.get("name", "")]
    with pytest.raises(ValueError, match="no rlprof iteration annotations"):
        stage_split.split(t)


def test_the_child_process_writes_both_files_atomically(tmp_path):
    raw = tmp_path / "raw.json"
    raw.write_text(json.dumps(trace()))
    written = stage_split.split_in_subprocess(raw, tmp_path, "rank0.5")
    assert sorted(s for s, _ in written) == ["decode", "prefill"]
    out = sorted(p.name for p in tmp_path.iterdir())
    assert out == ["rank0.5.decode.pt.trace.json.gz", "rank0.5.prefill.pt.trace.json.gz", "raw.json"]
    with gzip.open(tmp_path / "rank0.5.decode.pt.trace.json.gz", "rt") as f:
        assert "decode_kernel" in names(json.load(f))


def test_the_child_process_names_a_corrupt_file(tmp_path):
    """The child's own error reaches the caller: what failed, the exception and the file."""
    from rlprof_plugins._child import ChildFailed

    raw = tmp_path / "raw.json"
    raw.write_text("{not json")
    with pytest.raises(ChildFailed, match=r"stage split failed \(1\): TraceFormatError: .*raw.json"):
        stage_split.split_in_subprocess(raw, tmp_path, "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raw.json"]
