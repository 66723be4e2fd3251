"""Benchmark: what the cuda backend's NVTX ranges cost the engine thread (issue 47).

One iteration's range (push + pop in the ``rlprof`` domain, the name an
iteration gets) through the ways the ``nvtx`` package offers, each in a fresh
process (NVTX binds its tool on the first call) with no tool attached (what a
server not run under nsys pays) and with a tool attached (the tests' NVTX
recorder, ``tests/tools/nvtx_recorder.c``, which writes each event to a file
as a stand-in for nsys's own, cheaper, buffered collection):

- ``module``: ``nvtx.push_range(name, domain="rlprof")`` / ``nvtx.pop_range(domain="rlprof")``;
- ``domain``: ``Domain.push_range(Domain.get_event_attributes(message=name))`` / ``Domain.pop_range()``,
  what ``backends/cuda_profiler.py`` uses.

ns per range, best of 5 x 100,000, with the ratio of the two in one run.
Usage: ``.venv-vllm/bin/python benchmarks/bench_nvtx.py [--json F]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))

NAME = "rlprof::iteration 3 [decode] 8 reqs 8 tokens"
ONE = r'''
import timeit, nvtx, sys
name, way = sys.argv[1], sys.argv[2]
if way == "module":
    def one():
        nvtx.push_range(name, domain="rlprof"); nvtx.pop_range(domain="rlprof")
else:
    d = nvtx.get_domain("rlprof")
    def one():
        d.push_range(d.get_event_attributes(message=name)); d.pop_range()
n = 100_000
print(min(timeit.repeat(one, number=n, repeat=5)) / n * 1e9)
'''


def measure(way: str, env: dict) -> float:
    out = subprocess.run([sys.executable, "-c", ONE, NAME, way], env=env, check=True, capture_output=True, text=True)
    return float(out.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    args = parser.parse_args()
    from tests.helpers import nvtx_log

    base = {k: v for k, v in os.environ.items() if k not in ("NVTX_INJECTION64_PATH", "RLPROF_NVTX_LOG")}
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        attached = {**base, **nvtx_log.environment(Path(tmp))}
        for tool, env in (("no tool", base), ("tool attached", attached)):
            row = {way: measure(way, env) for way in ("module", "domain")}
            row["domain/module"] = row["domain"] / row["module"]
            results[tool] = row
            print(f"{tool:14} module {row['module']:8.0f} ns  domain {row['domain']:8.0f} ns  "
                  f"ratio {row['domain/module']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
