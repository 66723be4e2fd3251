"""Benchmark: a long run's worth of profiling, 100 global steps back to back on a real server under steady
streaming traffic (``tests/helpers/soak.py``), on each engine with sampled and with exact Python stacks, each on a
fresh server.

Reported per run: steps ``done``, the resident memory of the server and its children after step 10 and after the
last (the goal: within 64 MB), requests answered and failed, crash lines in the server's log (none; an ``EINTR``
counts as one), the median stop. The run's JSON goes to ``benchmarks/results/``; the table to stdout
(docs/performance.md, "A long run"). Usage: ``python benchmarks/bench_soak.py [--steps 100] [--hold 0.3]
[--engines vllm,sglang] [--stacks sampled,exact]`` (``make bench-soak``: ~25 min on 2 cores).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))  # after site-packages: rlprof_plugins is the installed wheel, tests/ comes from here


def main() -> int:
    from tests.helpers.soak import on_fresh_server, summary, verdict

    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--hold", type=float, default=0.3, help="seconds each step records")
    parser.add_argument("--engines", default="vllm,sglang")
    parser.add_argument("--stacks", default="sampled,exact")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as d:
        for engine in args.engines.split(","):
            for stacks in args.stacks.split(","):
                result = on_fresh_server(engine, stacks, args.steps, args.hold, Path(d))
                result["verdict"] = verdict(result)
                results.append(result)
                print(engine, stacks, json.dumps(summary(result)), result["verdict"], flush=True)
    out = args.out or REPO / "benchmarks" / "results" / f"{datetime.date.today()}-soak.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))
    print("| engine | stacks | steps done | tree RSS after step 10 / last (MB) | grown | requests answered, failed "
          "| crash lines | median stop |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        s = summary(r)
        print(f"| {s['engine']} | {s['stacks']} | {s['done']}/{s['steps']} | {s['rss_after_step_10_mb']:.0f} / "
              f"{s['rss_after_last_mb']:.0f} | {s['grown_mb']:+.0f} MB | {s['answered']}, {s['failures']} | "
              f"{s['crash_lines']} | {s['median_stop_s']:.2f} s |")
    return 0 if all(not r["verdict"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
