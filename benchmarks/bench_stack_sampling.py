"""Benchmark: the ways of recording Python stacks, on one engine-shaped thread, in one run.

Before choosing how ``python_stacks: "sampled"`` samples (``backends.stack_sampler``), each
candidate is measured on the same two workloads, on the process's main thread (where the
engines run their engine loops), three rounds:

- **cost**: what one sample costs the thread that takes it (the stack walk and the spans'
  update, at 20, 40 and 80 frames), and so the share of the engine thread's time at each rate.
  (Timing whole iterations with and without a sampler was tried: on this shared 2-core host a
  pure-Python loop's time varies twofold from one second to the next, more than the sampler's
  cost; the end-to-end cost on the real engines is ``bench_stop_stall.py --scenario bursty
  --stacks-modes``);
- **fidelity**: four functions that spin for 40/30/20/10% of each 50 ms iteration; the shares
  the recording gives (by samples, or by torch's exact events) against those shares, the
  largest error in points.

Candidates: torch's exact stacks (``with_stack``), the sampler thread and the signal timer
at several rates, each beside torch's profiler recording with stacks off (what a sampled
session runs); and torch with stacks off alone. An out-of-process reader (py-spy) is not
measured: it needs ptrace rights and a binary the engines' hosts rarely allow.

Usage: ``python benchmarks/bench_stack_sampling.py [--rates 100,200,500,1000] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))  # after site-packages: rlprof_plugins is the installed wheel, tests/ comes from here

from tests.helpers import spin_shares  # noqa: E402  the known-truth workload of the unit tests

def _at_depth(depth: int, work):
    return work() if depth <= 1 else _at_depth(depth - 1, work)


def sample_us(depth: int, samples: int = 20000) -> float:
    """What one sample costs the engine thread, in microseconds: the stack walk and the spans' update at
    ``depth`` frames (the signal way runs exactly this on the engine thread; the thread way the same on
    its own thread, plus the GIL handed over twice), the leaf changing every other sample."""
    from rlprof_plugins.backends.stack_sampler import StackSampler

    sampler = StackSampler(1000)

    def leaf_a():
        return sys._getframe()

    def leaf_b():
        return sys._getframe()

    frames = [_at_depth(depth, leaf_a), _at_depth(depth, leaf_b)]
    t0 = time.perf_counter()
    for i in range(samples):
        sampler._sample(frames[i & 1], i)
    return (time.perf_counter() - t0) / samples * 1e6


def _recording(mode: str, hz: int, how: str | None):
    """A context that records like a session of ``mode`` would (None: nothing)."""
    import torch

    from rlprof_plugins.backends.stack_sampler import StackSampler

    class Recording:
        def __enter__(self):
            self.prof = None
            self.sampler = None
            if mode != "none":
                self.prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                                   with_stack=mode == "exact")
                self.prof.start()
            if mode == "sampled":
                self.sampler = StackSampler(hz)
                self.sampler.start(how)
            return self

        def iteration(self, index: int | None):
            if self.sampler is not None:
                self.sampler.set_iteration(index)

        def __exit__(self, *exc):
            if self.sampler is not None:
                self.sampler.stop()
            if self.prof is not None:
                self.prof.stop()
    return Recording()


def fidelity(mode: str, hz: int, how: str | None, iterations: int = 60) -> float:
    """The largest error, in points, of the four functions' shares."""
    from rlprof_plugins.trace.analysis.python_stacks import PythonFrames

    with _recording(mode, hz, how) as rec:
        for i in range(iterations):
            rec.iteration(i)
            spin_shares.one_iteration()
            rec.iteration(None)
    frames = PythonFrames()
    if mode == "sampled":
        events = rec.sampler.events(0)
    else:
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "t.json"
            rec.prof.export_chrome_trace(str(path))
            events = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("cat") == "python_function"]
    for e in events:
        frames.add(e["cat"], e["tid"], e["ts"], e["ts"] + e["dur"], e["name"], e["args"].get("sampled_us", -1.0),
                   e["args"].get("depth", -1))
    got = spin_shares.shares(frames.by_stage([], set())["between"])
    return max(abs(got[name] - 100.0 * share) for name, share in spin_shares.SHARES.items())


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rates", default="100,200,500,1000")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rates = [int(r) for r in args.rates.split(",")]
    configs = [("none", 0, None), ("off", 0, None), ("exact", 0, None)]
    configs += [("sampled", hz, how) for how in ("signal", "thread") for hz in rates]
    configs = [("exact", 0, None)] + [("sampled", hz, how) for how in ("signal", "thread") for hz in rates]
    errors: dict[tuple, list[float]] = {c: [] for c in configs}
    for _ in range(args.rounds):
        for config in configs:
            errors[config].append(fidelity(*config))
    per_sample = {depth: statistics.median(sample_us(depth) for _ in range(3)) for depth in (20, 40, 80)}
    print("| one sample at 20 / 40 / 80 frames | " + " / ".join(f"{us:.1f} us" for us in per_sample.values()) + " |")
    print("| --- | --- |")
    for hz in rates:
        print(f"| engine thread's time at {hz} Hz, 40 frames | {hz * per_sample[40] / 1e4:.2f}% |")
    print()
    print(f"| recording | largest share error of {args.rounds} rounds (40/30/20/10% workload), points |")
    print("| --- | --- |")
    for config in configs:
        mode, hz, how = config
        label = "torch, exact stacks" if mode == "exact" else f"stacks off + {how} sampler, {hz} Hz"
        print(f"| {label} | {max(errors[config]):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
