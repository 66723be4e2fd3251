"""Where torch's own ``profiler.stop()`` spends its time, and how it grows.

Records K iterations of a Python-heavy loop (nested calls around small
tensor ops, as an engine's scheduler and model code are) with torch.profiler,
stacks on and off, and times on the recording thread:

- ``stop``: ``profile.stop()`` as the engine thread pays it; of which
  ``disable``: torch's ``_disable_profiler()`` (Kineto stops and torch turns
  the Python tracer's raw records into events: C++ holding the GIL), from
  torch's own ``_stats``;
- ``export``: ``export_chrome_trace`` (rlprof runs it on the exporter thread).

The stop grows linearly with what was recorded; its slope per iteration is
what a chunk of N iterations costs the engine in one pause.
Usage: ``python benchmarks/stop_breakdown.py [--iterations 32,64,128,256]``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch


def layer(x: torch.Tensor, depth: int) -> torch.Tensor:
    if depth == 0:
        return torch.relu(x @ x / 8)
    return layer(x, depth - 1) + 0.0


def iteration(x: torch.Tensor) -> torch.Tensor:
    for _ in range(8):
        x = layer(x, 4)
    return x


def one(k: int, with_stack: bool, out: Path) -> dict:
    x = torch.ones(8, 8)
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_stack=with_stack)
    prof.start()
    for i in range(k):
        with torch.profiler.record_function(f"rlprof::iteration {i}"):
            x = iteration(x)
    t0 = time.perf_counter()
    prof.stop()
    stop = time.perf_counter() - t0
    disable = prof.profiler._stats.profiler_disable_call_duration_us / 1e6
    t0 = time.perf_counter()
    prof.export_chrome_trace(str(out))
    export = time.perf_counter() - t0
    return {"iterations": k, "stack": with_stack, "stop_s": stop, "disable_s": disable, "export_s": export,
            "trace_mb": out.stat().st_size / 1e6}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", default="32,64,128,256")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        one(8, True, Path(d) / "warm.json")
        for with_stack in (True, False):
            for k in (int(v) for v in args.iterations.split(",")):
                rows.append(one(k, with_stack, Path(d) / f"{k}.json"))
    print(json.dumps(rows, indent=2))
    print("| stacks | iterations | stop on the recording thread | of which _disable_profiler | per iteration "
          "| export (off the engine) | trace |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {'on' if r['stack'] else 'off'} | {r['iterations']} | {r['stop_s']:.3f} s | {r['disable_s']:.3f} s "
              f"| {r['stop_s'] / r['iterations'] * 1e3:.2f} ms | {r['export_s']:.3f} s | {r['trace_mb']:.1f} MB |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
