"""Benchmark: what always-on step metrics cost the engine thread (issue 46, item 7).

1. **Per iteration** (microbenchmark, one process): vLLM's wrapped
   ``execute_model`` with no session, step metrics off (the worker's recorder
   cached as off) against on (a real ``StepRecorder`` writing to a temporary
   folder), on a scheduler output of 8 decoding requests; and the recorder's
   own ``begin``/``end`` alone, with the rollout tail (``metrics/tail.py``)
   and with a stand-in that keeps nothing in its place (what the tail adds).
   ns per call, best of 5 x 200,000.
2. **Throughput** (``idle_hook_ab.py``): one in-process vLLM engine serving
   rounds of 8 x 64-token generations, alternating the worker hook applied
   (the plugin loaded with ``torch_profiler_dir``: step metrics on, no
   session) and reverted (as if absent). Goal: tokens/s ratio >= 0.99.

Usage: ``.venv-vllm/bin/python benchmarks/bench_step_metrics.py [--rounds 5] [--json F]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import timeit
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))  # after site-packages: rlprof_plugins is the installed wheel


class NoTail:
    """In the rollout tail's place: keeps nothing."""

    def add(self, start_ns: int, end_ns: int, batch: int, tokens: int) -> None:
        pass

    def record(self):
        return None


def per_iteration(folder: Path) -> dict:
    from benchmarks.bench_vllm_profiling import decode_output, hooked_worker_classes, worker_with
    from rlprof_plugins.config.options import parse_options
    from rlprof_plugins.metrics.recorder import StepRecorder
    from rlprof_plugins.stages import IterationInfo

    Worker, Wrapped = hooked_worker_classes()
    output = decode_output()
    # the step metrics alone (the flight recorder, on by default, has its own: bench_flight_recorder.py)
    recorder = StepRecorder(folder, "rank0", parse_options({"flight_recorder": False}))
    recorder.started(1)
    bare, off, on = Worker(), worker_with(Wrapped, False), worker_with(Wrapped, recorder)
    n = 200_000

    def best(call) -> float:
        return min(timeit.repeat(call, number=n, repeat=5)) / n * 1e9

    info = IterationInfo(0, 8, 8)

    def recorder_only():
        recorder.begin()
        recorder.end(info)

    out = {"bare_ns": best(lambda: bare.execute_model(output)), "metrics_off_ns": best(lambda: off.execute_model(output)),
           "metrics_on_ns": best(lambda: on.execute_model(output)), "recorder_only_ns": best(recorder_only)}
    tail = recorder.metrics._tail
    recorder.metrics._tail = NoTail()
    out["recorder_only_without_tail_ns"] = best(recorder_only)
    recorder.metrics._tail = tail
    recorder.close()
    out["added_ns"] = out["metrics_on_ns"] - out["metrics_off_ns"]
    out["tail_added_ns"] = out["recorder_only_ns"] - out["recorder_only_without_tail_ns"]
    return {k: round(v, 1) for k, v in out.items()}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json")
    parser.add_argument("--no-engine", action="store_true", help="the microbenchmark only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = {"per_iteration": per_iteration(Path(tmp) / "steps")}
        print(json.dumps(out), flush=True)
        if not args.no_engine:
            from benchmarks.bench_vllm_profiling import idle_hook_ab

            out["idle_ab"] = idle_hook_ab(Path(tmp), rounds=args.rounds)
            steps = sorted((Path(tmp) / "ab").rglob("*.jsonl"))
            out["idle_ab"]["step_files"] = [p.name for p in steps]
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
