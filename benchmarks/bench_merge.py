"""Benchmark: merging rank traces, rlprof vs SGLang's ProfileMerger vs the gzip floor.

On identical inputs, each tool runs in a fresh child process; we report its
wall time and peak resident memory (``ru_maxrss`` of that child):

- **rlprof**: ``rlprof_plugins.trace.merge`` (streaming, gzip level 3);
- **sglang**: ``ProfileMerger`` from the published sglang 0.5.23 wheel
  (``sglang/srt/utils/profile_merger.py``, loaded from the wheel by path:
  it imports only the standard library, so the engine need not be installed);
- **floor**: decompress every input and recompress the same bytes (level 3),
  the least any merger that reads and writes gzip must do.

Inputs: the real 2-rank traces recorded from the vLLM CPU server
(tests/fixtures/vllm-0.32-cpu-tp2/global_step_3) and CUDA-shaped synthetic
2-rank traces of growing size (tests/helpers/synthetic_traces.py).

Usage: ``.venv-vllm/bin/python benchmarks/bench_merge.py [--sizes 20,100,300]``
(``make bench-merge``); sizes are uncompressed MB over both ranks.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.helpers.synthetic_traces import write_rank_trace  # noqa: E402

SGLANG = "sglang==0.5.23"
MERGER_IN_WHEEL = "sglang/srt/utils/profile_merger.py"
CACHE = REPO / ".cache" / "sglang-wheel"

RUN_RLPROF = """
import sys
from pathlib import Path
from rlprof_plugins.trace.merge import merge
from rlprof_plugins.trace.sources import MergeGroup, RankFile
files = [Path(p) for p in sys.argv[2:]]
merge(MergeGroup(files[0].parent, None, [RankFile(p, f"rank{k}", "worker", (0, k)) for k, p in enumerate(files)]),
      Path(sys.argv[1]))
"""

RUN_SGLANG = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("profile_merger", sys.argv[1])
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
mod.ProfileMerger(sys.argv[2], "bench").merge_chrome_traces()
"""

RUN_FLOOR = """
import gzip, shutil, sys
with gzip.open(sys.argv[1], "wb", compresslevel=3) as out:
    for p in sys.argv[2:]:
        with gzip.open(p, "rb") as src:
            shutil.copyfileobj(src, out, 1 << 20)
"""


def sglang_merger() -> Path:
    """profile_merger.py from the sglang wheel (downloaded once, no dependencies)."""
    target = CACHE / "profile_merger.py"
    if target.exists():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", SGLANG, "--no-deps", "-d", str(CACHE), "-q"], check=True)
    (wheel,) = CACHE.glob("sglang-*.whl")
    with zipfile.ZipFile(wheel) as z:
        target.write_bytes(z.read(MERGER_IN_WHEEL))
    return target


def run_child(code: str, *args: str) -> dict:
    """Run ``code`` in a fresh interpreter; wall seconds and peak RSS (MB)."""
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code, *args], cwd=REPO, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - t
    err = proc.stderr.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"child failed: {err[-2000:]}")
    return {"seconds": round(seconds, 3), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1)}


def uncompressed_mb(paths: list[Path]) -> float:
    total = 0
    for p in paths:
        with gzip.open(p, "rb") as f:
            while chunk := f.read(1 << 20):
                total += len(chunk)
    return total / 1e6


def measure(inputs: list[Path], work: Path, merger: Path) -> dict:
    """The three tools on the same input files."""
    sgl_dir = work / "sglang"
    sgl_dir.mkdir()
    for k, p in enumerate(inputs):  # SGLang finds its inputs by name: <profile_id>-TP-<k>
        os.link(p, sgl_dir / f"bench-TP-{k}.trace.json.gz")
    out = {
        "input_mb": round(uncompressed_mb(inputs), 1),
        "input_gz_mb": round(sum(p.stat().st_size for p in inputs) / 1e6, 1),
        "floor": run_child(RUN_FLOOR, str(work / "floor.json.gz"), *map(str, inputs)),
        "rlprof": run_child(RUN_RLPROF, str(work / "rlprof.json.gz"), *map(str, inputs)),
        "sglang": run_child(RUN_SGLANG, str(merger), str(sgl_dir)),
    }
    out["rlprof"]["output_gz_mb"] = round((work / "rlprof.json.gz").stat().st_size / 1e6, 1)
    out["sglang"]["output_gz_mb"] = round((sgl_dir / "merged-bench.trace.json.gz").stat().st_size / 1e6, 1)
    return out


def synthetic_inputs(work: Path, total_mb: int) -> list[Path]:
    # ~2.2 KB per iteration per rank with this padding (measured by the writer's output)
    iterations = max(1, int(total_mb * 1e6 / 2 / 2200))
    return [write_rank_trace(work / f"rank{k}.1.pt.trace.json.gz", rank=k, iterations=iterations,
                             base_ns=1_790_000_000_000_000_000 + k * 1_000_000, padding=600) for k in range(2)]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="20,100,300", help="synthetic sizes, uncompressed MB over both ranks")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results-merge.json")
    args = parser.parse_args()
    merger = sglang_merger()
    results = []
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        real = root / "real"
        real.mkdir()
        src = REPO / "tests" / "fixtures" / "vllm-0.32-cpu-tp2" / "global_step_3"
        inputs = [shutil.copy(p, real / p.name) for p in sorted(src.glob("rank*.pt.trace.json.gz"))]
        results.append({"input": "real vLLM CPU TP=2 (2 ranks)", **measure([Path(p) for p in inputs], real, merger)})
        for mb in (int(s) for s in args.sizes.split(",")):
            work = root / f"syn{mb}"
            work.mkdir()
            results.append({"input": "synthetic CUDA-shaped, 2 ranks", **measure(synthetic_inputs(work, mb), work, merger)})
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(render_markdown(results))
    return 0


def render_markdown(results: list[dict]) -> str:
    lines = [
        "| input | size (uncompressed / gz) | floor: gunzip + gzip | rlprof merge | SGLang ProfileMerger | "
        "time: SGLang / rlprof | peak memory: SGLang / rlprof |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        f, o, s = r["floor"], r["rlprof"], r["sglang"]
        lines.append(
            f"| {r['input']} | {r['input_mb']} MB / {r['input_gz_mb']} MB "
            f"| {f['seconds']:.2f} s, {f['peak_rss_mb']:.0f} MB "
            f"| {o['seconds']:.2f} s, {o['peak_rss_mb']:.0f} MB "
            f"| {s['seconds']:.2f} s, {s['peak_rss_mb']:.0f} MB "
            f"| {s['seconds'] / o['seconds']:.1f}x | {s['peak_rss_mb'] / o['peak_rss_mb']:.1f}x |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
