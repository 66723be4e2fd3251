"""Benchmark: what writing a flight recorder dump costs the engine thread it records, against ``max_pause_ms``.

A dump is written by the recorder's own thread inside the engine process, so the engine thread and the
writer share Python's lock. The figure is the engine thread's longest gap: an "engine" thread runs short
pure-Python iterations back to back and notes the time between each two; the longest gap while a dump is
written is what the dump held the engine up at once. Side by side in one run:

- the engine thread alone (what the machine itself adds);
- while a dump of the default settings is written (``seconds`` 60, ``sample_hz`` 10, ``max_mb`` 32), the
  ring full: one minute of 2 ms iterations filling the cap, stack samples 60 frames deep;
- while a dump of the largest settings a user is likely to give is written (``sample_hz`` 200,
  ``max_mb`` 256: about 260 MB of trace).

Each case also reports the garbage collector's longest pass in the process during it (a dump that leaves
many objects behind makes the collector walk the engine's whole heap). Goal: every gap within
``max_pause_ms`` (200 ms by default).

Usage: ``.venv-vllm/bin/python benchmarks/bench_flight_dump.py [--json F]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))  # after site-packages: rlprof_plugins is the installed wheel


def full_recorder(root: str, settings: dict):
    """A recorder whose ring holds a full minute: iterations up to its cap, and deep stack samples."""
    from rlprof_plugins.metrics.flight import FlightRecorder, RingIteration, StackSample
    from rlprof_plugins.metrics.flight_dump import DumpWriter

    recorder = FlightRecorder(settings, DumpWriter(root, "rank0", settings, "bench"))
    recorder.after_ns = 0  # written as soon as asked
    now = time.time_ns()
    span = int(settings["seconds"] * 1e9)
    n = recorder.iterations.maxlen
    for i in range(n):
        start = now - span + i * (span // n)
        recorder.iterations.append(RingIteration(i, start, start + span // n - 1000, 5 if i % 3 == 0 else -1, 4,
                                                 4, 2, False))
    recorder.count = n
    codes = [v.__code__ for m in list(sys.modules.values()) for v in list(vars(m).values())
             if isinstance(getattr(v, "__code__", None), types.CodeType)]
    rng = random.Random(1)
    samples = recorder.samples.maxlen
    for k in range(samples):
        stack = codes[:40] + ([rng.choice(codes) for _ in range(20)] if k % 2 else codes[40:60])
        recorder.samples.append(StackSample(now - span + k * span // samples, tuple(stack), None))
    return recorder


def engine_gaps(during) -> dict:
    """An engine thread's iterations while ``during`` runs on this thread (and half a second either side):
    its longest gap, and the collector's longest pass."""
    gaps: list[float] = []
    passes: list[float] = []
    started = [0.0]

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            passes.append(time.perf_counter() - started[0])

    stop = threading.Event()

    def engine() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            x = 0
            for i in range(200):
                x += i
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    gc.callbacks.append(on_gc)
    thread = threading.Thread(target=engine)
    thread.start()
    time.sleep(0.5)
    t = time.perf_counter()
    during()
    took = time.perf_counter() - t
    time.sleep(0.5)
    stop.set()
    thread.join()
    gc.callbacks.remove(on_gc)
    return {"longest_gap_ms": round(max(gaps) * 1e3, 1), "gc_longest_ms": round(max(passes or [0]) * 1e3, 1),
            "seconds": round(took, 2)}


def dump_case(settings: dict) -> dict:
    root = tempfile.mkdtemp(prefix="rlprof-bench-dump-")
    recorder = full_recorder(root, settings)

    def dump() -> None:
        recorder.request()
        while recorder.dumps == 0:
            time.sleep(0.01)

    out = engine_gaps(dump)
    out["dump_mb"] = round(sum(p.stat().st_size for p in Path(root).rglob("*.json")) / 1e6, 1)
    out["ring_iterations"] = recorder.iterations.maxlen
    recorder.close(write=False)
    return out


def main() -> int:
    from rlprof_plugins.config.options import DEFAULT_MAX_PAUSE_MS, FLIGHT_DEFAULTS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    args = parser.parse_args()
    out = {"max_pause_ms": DEFAULT_MAX_PAUSE_MS, "python": sys.version.split()[0]}
    out["engine alone"] = engine_gaps(lambda: time.sleep(10))
    print("engine alone", out["engine alone"], flush=True)
    for name, settings in (("dump, defaults", dict(FLIGHT_DEFAULTS)),
                           ("dump, sample_hz 200, max_mb 256", dict(FLIGHT_DEFAULTS, sample_hz=200, max_mb=256))):
        out[name] = dump_case(settings)
        print(name, out[name], flush=True)
    print(json.dumps(out, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
