"""Rank traces in Kineto's CUDA shape, written event by event.

The CPU servers of the end-to-end tests record no kernels, device pids or
CUDA flows, so merge/split/summary rules about those are exercised on these:
each iteration is an ``rlprof::iteration`` range with a host op, a
``cudaLaunchKernel`` (``correlation`` = its index + 1), the ``ac2g`` flow
pair and the kernel on device pid 0 -- the same pids and ids in every rank,
as real ranks have. Sizes scale with ``iterations`` (the benchmark writes
hundreds of MB this way without holding them in memory).
"""

from __future__ import annotations

from pathlib import Path

from rlprof_plugins.trace.format.writer import TraceWriter

CPU_PID, GPU_PID, STREAM = 4242, 0, 7


def write_rank_trace(path: Path, *, rank: int, iterations: int, base_ns: int = 1_790_000_000_000_000_000,
                     slow: float = 1.0, prefill_every: int = 8, padding: int = 0) -> Path:
    """``slow`` stretches this rank's iterations (imbalance); ``padding``
    adds that many characters of args per event (size without more events)."""
    header = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "Synthetic GPU", "totalGlobalMem": 85899345920}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": base_ns,
    }
    pad = {"pad": "x" * padding} if padding else {}
    with TraceWriter(path, header) as w:
        for meta in (
            {"ph": "M", "name": "process_name", "pid": CPU_PID, "tid": 0, "args": {"name": "python"}},
            {"ph": "M", "name": "process_labels", "pid": CPU_PID, "tid": 0, "args": {"labels": "CPU"}},
            {"ph": "M", "name": "process_sort_index", "pid": CPU_PID, "tid": 0, "args": {"sort_index": CPU_PID}},
            {"ph": "M", "name": "thread_name", "pid": CPU_PID, "tid": CPU_PID, "args": {"name": "thread (python)"}},
            {"ph": "M", "name": "process_name", "pid": GPU_PID, "tid": 0, "args": {"name": "GPU 0"}},
            {"ph": "M", "name": "process_sort_index", "pid": GPU_PID, "tid": 0, "args": {"sort_index": 5000000}},
            {"ph": "M", "name": "thread_name", "pid": GPU_PID, "tid": STREAM, "args": {"name": "stream 7"}},
        ):
            w.write(meta)
        t = 1000.0
        for k in range(iterations):
            stage = "prefill" if k % prefill_every == 0 else "decode"
            dur = (400.0 if stage == "prefill" else 100.0) * slow
            tokens = "prefill_tokens=64 decode_tokens=0" if stage == "prefill" else "prefill_tokens=0 decode_tokens=4"
            corr = k + 1
            w.write({"ph": "X", "cat": "user_annotation", "name": f"rlprof::iteration {k} [{stage}] {tokens} batch=4",
                     "pid": CPU_PID, "tid": CPU_PID, "ts": t, "dur": dur, "args": {}})
            w.write({"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": CPU_PID, "tid": CPU_PID,
                     "ts": t + 5, "dur": dur * 0.5, "args": {"External id": corr, **pad}})
            w.write({"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": CPU_PID, "tid": CPU_PID,
                     "ts": t + 10, "dur": dur * 0.3, "args": {"External id": corr}})
            w.write({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": CPU_PID, "tid": CPU_PID,
                     "ts": t + 20, "dur": 5, "args": {"correlation": corr, "External id": corr}})
            w.write({"ph": "s", "id": corr, "pid": CPU_PID, "tid": CPU_PID, "ts": t + 20, "cat": "ac2g", "name": "ac2g"})
            kname = "flash_prefill_kernel" if stage == "prefill" else "paged_decode_kernel"
            w.write({"ph": "X", "cat": "kernel", "name": kname, "pid": GPU_PID, "tid": STREAM, "ts": t + 30,
                     "dur": dur * 0.8, "args": {"correlation": corr, "External id": corr, "device": 0, "stream": STREAM}})
            w.write({"ph": "f", "id": corr, "pid": GPU_PID, "tid": STREAM, "ts": t + 30, "cat": "ac2g", "name": "ac2g",
                     "bp": "e"})
            t += dur + 50.0
        w.close({"traceName": str(path)})
    return path
