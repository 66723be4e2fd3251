"""Benchmark: the trace tools (merge, split-stages, summary) against the gzip floor and SGLang.

Every tool runs in a fresh child process on the same input files; we report
its wall time (the median of three runs; SGLang's merger: one run) and its
peak memory, the resident set summed over the child
and every process it starts (sampled from /proc every 50 ms), so a tool that
works in several processes is charged for all of them.

- **floor**: decompress every input and recompress the same bytes at the
  tools' gzip level (3) with Python's ``gzip`` (zlib), one process: the least
  any tool that reads and writes gzip must do. The issue's goal: within 2x.
- **rlprof**: ``rlprof merge`` / ``split-stages`` / ``summary`` as users run
  them, with what is installed (msgspec, zlib-ng) and, to show what each
  library is worth, the same with ``RLPROF_TRACE_ACCEL=none`` (standard
  library only) and, for merge, in one process (``--jobs 1``).
- **SGLang**: ``ProfileMerger`` from the published sglang 0.5.23 wheel
  (``sglang/srt/utils/profile_merger.py``, loaded by path: it imports only
  the standard library). It has no split or summary.

Inputs: the real TP=2 traces of the vLLM CPU server (tests/fixtures) and
vLLM-GPU-shaped Kineto traces (tests/helpers/kineto_gpu.py: decode on CUDA
graphs, or everything eager) at 2 ranks x 200 MB and 8 ranks x 250 MB
(uncompressed, per rank). For each input the table says how it compresses
(gzip level 3) and its bytes per event; ``--reference FILE...`` adds real
traces to that table, so the synthetic ones can be judged against them.

Usage: ``.venv-vllm/bin/python benchmarks/bench_trace_tools.py [--quick]``
(``make bench-merge``); ``--quick``: 2 ranks x 20 MB only.
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
import threading
import time
import zipfile
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))  # after site-packages: rlprof_plugins is the installed wheel, tests/ comes from here

from tests.helpers.kineto_gpu import write_gpu_rank  # noqa: E402

SGLANG = "sglang==0.5.23"
MERGER_IN_WHEEL = "sglang/srt/utils/profile_merger.py"
CACHE = REPO / ".cache" / "sglang-wheel"
LEVEL = 3
REPEAT = 3  # runs of each floor and rlprof measurement; the median is reported (SGLang's: one run)
DATASETS = [  # name, ranks, MB per rank, CUDA graphs
    ("vLLM GPU-shaped, CUDA graphs", 2, 200, True),
    ("vLLM GPU-shaped, eager", 2, 200, False),
    ("vLLM GPU-shaped, CUDA graphs", 8, 250, True),
]

RUN_FLOOR = """
import gzip, shutil, sys
with gzip.open(sys.argv[1], "wb", compresslevel=int(sys.argv[2])) as out:
    for p in sys.argv[3:]:
        with gzip.open(p, "rb") as src:
            shutil.copyfileobj(src, out, 1 << 20)
"""

RUN_SGLANG = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("profile_merger", sys.argv[1])
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
mod.ProfileMerger(sys.argv[2], "bench").merge_chrome_traces()
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


PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def _tree_rss_kb(root: int) -> int:
    """Resident memory of ``root`` and all its descendants, following
    /proc/<pid>/task/<tid>/children (a few small reads: the sampler must not
    take a core from the tool it measures)."""
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * PAGE_KB
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError, IndexError):
            continue
    return total


def run_child(argv: list[str], env: dict | None = None, repeat: int = 1, cwd: Path = REPO) -> dict:
    """Run a child ``repeat`` times; the median wall seconds (this shared
    2-core machine varies by a third from run to run) and the largest peak of
    its process tree's summed RSS (MB)."""
    runs = [_run_once(argv, env, cwd) for _ in range(repeat)]
    return {"seconds": sorted(r["seconds"] for r in runs)[len(runs) // 2],
            "peak_mb": max(r["peak_mb"] for r in runs), "runs": [r["seconds"] for r in runs]}


def _run_once(argv: list[str], env: dict | None = None, cwd: Path = REPO) -> dict:
    t = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, **(env or {})})
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while True:
            peak[0] = max(peak[0], _tree_rss_kb(proc.pid))
            if done.wait(0.05):
                return

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    err = proc.stderr.read().decode(errors="replace")
    proc.wait()
    seconds = time.perf_counter() - t
    done.set()
    sampler.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:4]} failed: {err[-2000:]}")
    # (not ru_maxrss: a forked child starts with its parent's high-water mark)
    return {"seconds": round(seconds, 3), "peak_mb": round(peak[0] / 1024, 1)}


def rlprof(*args: str) -> list[str]:
    return [sys.executable, "-m", "rlprof_plugins.cli", *args, "-q"]


def describe(paths: list[Path]) -> dict:
    """Size, events and compressibility (gzip level 3 of the first file), streaming
    (the benchmark's own memory is inherited by the children it measures)."""
    raw = sum(_uncompressed(p) for p in paths)
    size = events = packed_size = 0
    packer = zlib.compressobj(LEVEL, zlib.DEFLATED, 31)
    for chunk in _chunks(paths[0]):
        size += len(chunk)
        events += chunk.count(b'"ph"')
        packed_size += len(packer.compress(chunk))
    packed_size += len(packer.flush())
    return {"input_mb": round(raw / 1e6, 1), "input_gz_mb": round(sum(p.stat().st_size for p in paths) / 1e6, 1),
            "bytes_per_event": round(size / max(events, 1)), "gzip3_ratio": round(size / packed_size, 1)}


def _chunks(path: Path):
    with gzip.open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            yield chunk


def _uncompressed(path: Path) -> int:
    return sum(len(c) for c in _chunks(path))


def measure(name: str, step: Path, merger: Path, with_sglang: bool = True, with_split: bool = True) -> dict:
    """Every tool on the rank traces of ``step`` (split: its first trace)."""
    inputs = sorted(step.glob("rank*.pt.trace.json.gz"))
    work = step.parent / f"{step.name}-out"
    work.mkdir()
    out = {"input": name, "ranks": len(inputs), **describe(inputs)}
    floor_all = run_child([sys.executable, "-c", RUN_FLOOR, str(work / "floor.gz"), str(LEVEL), *map(str, inputs)],
                          repeat=REPEAT)
    floor_one = run_child([sys.executable, "-c", RUN_FLOOR, str(work / "floor1.gz"), str(LEVEL), str(inputs[0])],
                          repeat=REPEAT)
    merged = work / "merged.pt.trace.json.gz"
    out["merge"] = {
        "floor": floor_all,
        "rlprof": run_child(rlprof("merge", *map(str, inputs), "-o", str(merged)), repeat=REPEAT),
        "rlprof_one_process": run_child(rlprof("merge", *map(str, inputs), "-o", str(merged), "--jobs", "1"),
                                        repeat=REPEAT),
        "rlprof_stdlib": run_child(rlprof("merge", *map(str, inputs), "-o", str(merged)), {"RLPROF_TRACE_ACCEL": "none"},
                                   repeat=REPEAT),
    }
    out["merge"]["output_gz_mb"] = round(merged.stat().st_size / 1e6, 1)
    if with_sglang:
        sgl = work / "sglang"
        sgl.mkdir()
        for k, p in enumerate(inputs):  # SGLang finds its inputs by name: <profile_id>-TP-<k>
            os.link(p, sgl / f"bench-TP-{k}.trace.json.gz")
        out["merge"]["sglang"] = run_child([sys.executable, "-c", RUN_SGLANG, str(merger), str(sgl)])
        shutil.rmtree(sgl)
    split_dir = work / "split-{stage}"
    out["split"] = None if not with_split else {
        "floor": floor_one,
        "rlprof": run_child(rlprof("split-stages", str(inputs[0]), "-o", str(split_dir)), repeat=REPEAT),
        "rlprof_stdlib": run_child(rlprof("split-stages", str(inputs[0]), "-o", str(split_dir)),
                                   {"RLPROF_TRACE_ACCEL": "none"}, repeat=REPEAT),
    }
    out["summary"] = {
        "floor": floor_all,
        "rlprof": run_child(rlprof("summary", str(step), "--json"), repeat=REPEAT),
        "rlprof_stdlib": run_child(rlprof("summary", str(step), "--json"), {"RLPROF_TRACE_ACCEL": "none"},
                                   repeat=REPEAT),
    }
    shutil.rmtree(work)
    return out


def synthetic_step(root: Path, ranks: int, mb: int, graphs: bool) -> Path:
    step = root / f"syn-{ranks}x{mb}-{'graphs' if graphs else 'eager'}"
    step.mkdir()
    for k in range(ranks):
        write_gpu_rank(step / f"rank{k}.{1795366444000000000 + k * 1250000}.pt.trace.json.gz", rank=k, world=ranks,
                       megabytes=mb, cuda_graphs=graphs, seed=ranks)
    return step


def real_step(root: Path) -> Path:
    step = root / "real"
    step.mkdir()
    for p in sorted((REPO / "tests" / "fixtures" / "vllm-0.32-cpu-tp2" / "global_step_3").rglob("rank*.pt.trace.json.gz")):
        shutil.copy(p, step / p.name)
    return step


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="2 ranks x 20 MB only")
    parser.add_argument("--no-sglang", action="store_true", help="skip SGLang's merger (slow, memory-hungry)")
    parser.add_argument("--reference", nargs="*", type=Path, default=[], help="real traces to compare compressibility")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results-trace-tools.json")
    args = parser.parse_args()
    merger = sglang_merger()
    datasets = [("vLLM GPU-shaped, CUDA graphs", 2, 20, True)] if args.quick else DATASETS
    results: dict = {"references": [{"input": str(p), **describe([p])} for p in args.reference], "runs": []}
    with tempfile.TemporaryDirectory(dir=os.environ.get("RLPROF_BENCH_TMP")) as d:
        root = Path(d)
        results["runs"].append(measure("real vLLM CPU TP=2", real_step(root), merger))
        if args.reference:  # real GPU traces merged as the ranks of one step (no rlprof annotations: no split)
            step = root / "reference"
            step.mkdir()
            for k, p in enumerate(args.reference):
                os.symlink(p.resolve(), step / f"rank{k}.{k + 1}.pt.trace.json.gz")
            results["runs"].append(measure("real GPU traces (--reference)", step, merger, with_split=False))
        for name, ranks, mb, graphs in datasets:
            step = synthetic_step(root, ranks, mb, graphs)
            results["runs"].append(measure(name, step, merger, with_sglang=not args.no_sglang))
            shutil.rmtree(step)
            print(json.dumps(results["runs"][-1]), file=sys.stderr, flush=True)
    args.out.write_text(json.dumps(results, indent=2))
    print(render_markdown(results))
    return 0


def _cell(r: dict | None) -> str:
    if not r:
        return "-"
    return f"{r['seconds']:.2f} s, " + (f"{r['peak_mb']:.0f} MB" if r["peak_mb"] else "(ended before a sample)")


def render_markdown(results: dict) -> str:
    lines = ["Inputs:", "",
             "| input | ranks | uncompressed / gz | bytes per event | gzip -3 ratio |", "| --- | --- | --- | --- | --- |"]
    for r in results["references"] + results["runs"]:
        lines.append(f"| {r['input']} | {r.get('ranks', 1)} | {r['input_mb']} MB / {r['input_gz_mb']} MB "
                     f"| {r['bytes_per_event']} | {r['gzip3_ratio']} |")
    for tool in ("merge", "split", "summary"):
        lines += ["", f"`rlprof {'split-stages' if tool == 'split' else tool}`:", "",
                  "| input | floor | rlprof | rlprof / floor | stdlib only | "
                  + ("one process | SGLang ProfileMerger | SGLang / rlprof |" if tool == "merge" else ""),
                  "| --- | --- | --- | --- | --- |" + (" --- | --- | --- |" if tool == "merge" else "")]
        for r in results["runs"]:
            t = r[tool]
            if t is None:
                continue
            row = (f"| {r['input']}, {r['ranks']} x {r['input_mb'] / r['ranks']:.0f} MB | {_cell(t['floor'])} "
                   f"| {_cell(t['rlprof'])} | {t['rlprof']['seconds'] / t['floor']['seconds']:.2f}x "
                   f"| {_cell(t['rlprof_stdlib'])} |")
            if tool == "merge":
                s = t.get("sglang")
                row += (f" {_cell(t['rlprof_one_process'])} | {_cell(s)} | "
                        + (f"{s['seconds'] / t['rlprof']['seconds']:.1f}x |" if s else "- |"))
            lines.append(row)
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
