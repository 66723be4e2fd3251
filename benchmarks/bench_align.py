"""What aligning ranks on their collectives costs a merge (docs/performance.md).

Two CUDA-shaped synthetic ranks (tests/helpers/kineto_gpu.py: ``c10d::allreduce_``
CPU ops and ``ncclDevKernel_AllReduce`` kernels in every layer) of about
``--mb`` MB of trace text each, merged in one run with ``rlprof merge
--align clock`` (each host's wall clock: what one host gets) and ``--align
collectives`` (what ranks from several hosts get), alternating, ``--repeat``
times each. Reported: the median wall time of each and their ratio, and what
the alignment read (pairs per rank). Synthetic ranks are not synchronised, so
their residual says nothing; the alignment's accuracy is measured on real
traces in tests/unit/test_multinode.py.

    .venv-vllm/bin/python benchmarks/bench_align.py [--mb 100] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))  # after site-packages: rlprof_plugins is the installed wheel, tests/ comes from here

from tests.helpers.kineto_gpu import write_gpu_rank  # noqa: E402


def merge(inputs: list[Path], out: Path, align: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "rlprof_plugins.cli", "merge", *map(str, inputs), "-o", str(out),
                    "--align", align, "--quiet"], check=True, cwd=REPO)
    return time.perf_counter() - t0


def clock_of(out: Path) -> dict:
    with gzip.open(out, "rt") as f:
        f.seek(0, 2)  # the trailer holds rlprof_merge; read the last part only
        size = f.tell()
        f.seek(max(0, size - (4 << 20)))
        tail = f.read()
    at = tail.rfind('"rlprof_merge"')
    return json.JSONDecoder().raw_decode(tail, tail.index("{", at))[0]["clock"]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        inputs = [write_gpu_rank(root / f"rank{k}.{1795366444000000000 + k}.pt.trace.json.gz", rank=k,
                                 megabytes=args.mb, cuda_graphs=False, seed=7) for k in range(2)]
        size = sum(p.stat().st_size for p in inputs) / 1e6
        times: dict[str, list[float]] = {"clock": [], "collectives": []}
        for _ in range(args.repeat):
            for align in times:
                times[align].append(merge(inputs, root / f"merged.{align}.pt.trace.json.gz", align))
        clock = clock_of(root / "merged.collectives.pt.trace.json.gz")
    med = {align: statistics.median(t) for align, t in times.items()}
    print(f"2 ranks x {args.mb:g} MB of trace text ({size:.0f} MB gzip), {args.repeat} runs each, alternating")
    print("| `--align` | median wall | runs |")
    print("| --- | --- | --- |")
    for align, t in times.items():
        print(f"| `{align}` | {med[align]:.2f} s | {', '.join(f'{x:.2f}' for x in t)} |")
    print(f"ratio collectives / clock: {med['collectives'] / med['clock']:.3f}")
    print(f"aligned on: {clock['aligned_on']}, pairs: {[r['pairs'] for r in clock.get('ranks', [])]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
