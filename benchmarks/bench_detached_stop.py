"""torch's stop off the engine thread against torch's own stop (issue 57; ``backends/detached_stop.py``).

The torch backend records N iterations of a small CPU workload (about ten operators each), then stops,
both ways, alternating, each way ``--rounds`` times. Per way, the median of: the seconds the stop held the
recording thread (``stop()`` returning), the longest the recording thread went without running Python
from the stop until the trace was written (a loop of Python work on it throughout), and the seconds
until the trace was written. Results in docs/performance.md ("torch's stop off the engine thread").

Usage: ``python benchmarks/bench_detached_stop.py [--operators 18000,72000] [--rounds 5]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

import torch

from rlprof_plugins.backends import detached_stop
from rlprof_plugins.backends.torch_profiler import TorchProfilerBackend, TorchSettings
from rlprof_plugins.store.layout import Placement

X = torch.randn(32, 32)
OPERATORS_AN_ITERATION = 10


def one(iterations: int, folder: Path, detached: bool) -> tuple[float, float, float]:
    """(stop seconds on this thread, its longest gap from the stop to the written trace, seconds to it)."""
    if detached:
        os.environ.pop(detached_stop.OFF_ENV, None)
    else:
        os.environ[detached_stop.OFF_ENV] = "1"
    backend = TorchProfilerBackend(TorchSettings(use_gzip=False))
    backend.start()
    for _ in range(iterations):
        X[1:5].transpose(0, 1).reshape(-1).unsqueeze(0) * 2
    written = threading.Event()

    def export() -> None:
        backend.export(Placement(folder, False), f"w{time.time_ns()}")
        written.set()

    began = time.perf_counter()
    backend.stop()
    stopped = time.perf_counter()
    assert backend.detached is detached
    writer = threading.Thread(target=export)
    writer.start()
    longest, last = stopped - began, stopped
    while not written.is_set():  # the engine's own Python work, measured by its gaps
        sum(range(200))
        now = time.perf_counter()
        longest, last = max(longest, now - last), now
    writer.join()
    return stopped - began, longest, time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--operators", default="18000,72000")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    why = detached_stop.why_not(torch, ("CPU",))
    if why:
        raise SystemExit(f"no detached stop here: {why}")
    print("| operators | torch's stop | held the recording thread | its longest gap, stop to written trace | "
          "stop to written trace |")
    print("| --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as d:
        for operators in (int(n) for n in args.operators.split(",")):
            runs: dict[bool, list[tuple[float, float, float]]] = {True: [], False: []}
            for _ in range(args.rounds):
                for detached in (False, True):
                    runs[detached].append(one(operators // OPERATORS_AN_ITERATION, Path(d), detached))
            for detached in (False, True):
                held, gap, total = (statistics.median(r[k] for r in runs[detached]) for k in range(3))
                way = "off the engine thread" if detached else "torch's own (forked writer)"
                print(f"| {operators:,} | {way} | {held * 1000:.1f} ms | {gap * 1000:.1f} ms | {total * 1000:.0f} ms |")
    os.environ.pop(detached_stop.OFF_ENV, None)


if __name__ == "__main__":
    main()
