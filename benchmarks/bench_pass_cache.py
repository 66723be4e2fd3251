"""Benchmark: the local report with its cache of passes, against the report that reads every trace.

Input: a root of ``--steps`` global-step folders (default 60), each a copy of a real vLLM TP=2 CPU step
(tests/fixtures/vllm-0.32-cpu-tp2, two rank traces). In one process, three rounds, the median of each,
the plan made each time (``plan_root``) and the report built from it:

- **cold**: no cache yet, filling the cache of passes (as ``rlprof report`` does by default), against
  the same reading every trace (``LocalPasses(use_cache=False)``);
- **warm**: the report again, nothing changed: every pass answered by the cache;
- **one rank rewritten**: then every step's rank 1 file touched (a late rank, a rewrite), and the report
  again: its rank 0 pass answered by the cache of passes.

Usage: ``python benchmarks/bench_pass_cache.py [--steps N] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlprof_plugins.report.render.build import build_here  # noqa: E402
from rlprof_plugins.report.plan.state_store import CACHE_DIR  # noqa: E402
from tests.unit.test_fleet_report import FIXTURE, copy_step  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--json")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rlprof-bench-passes-"))
    root = work / "root"
    try:
        for step in range(1, args.steps + 1):
            copy_step(FIXTURE, root / f"global_step_{step}", step)
        seconds: dict[str, list[float]] = {}
        for _round in range(3):
            for case in ("passes kept", "every trace read"):
                shutil.rmtree(root / CACHE_DIR, ignore_errors=True)
                kept = case == "passes kept"

                def report() -> float:
                    started = time.perf_counter()
                    build_here(root, use_cache=kept)
                    return time.perf_counter() - started

                seconds.setdefault(f"cold, {case}", []).append(report())
                seconds.setdefault(f"warm, {case}", []).append(report())
                for step in range(1, args.steps + 1):
                    trace = next((root / f"global_step_{step}" / "ranks").glob("rank1.*"))
                    st = trace.stat()
                    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
                seconds.setdefault(f"one rank rewritten, {case}", []).append(report())
        out = {"steps": args.steps, "ranks": 2, "trace_bytes": sum(p.stat().st_size for p in root.rglob("rank*.gz")),
               "median_seconds": {k: round(sorted(v)[1], 3) for k, v in seconds.items()},
               "runs": {k: [round(s, 3) for s in v] for k, v in seconds.items()}}
        m = out["median_seconds"]
        out["ratios"] = {k: round(m[f"{k}, passes kept"] / m[f"{k}, every trace read"], 3)
                         for k in ("cold", "warm", "one rank rewritten")}
        print(json.dumps(out, indent=1))
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
