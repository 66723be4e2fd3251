"""Benchmark: ``rlprof report`` against ``rlprof summary`` on the same root, cold and warm, and the page.

Input: a root of ``--steps`` global-step folders (default 10), each 2 ranks of
vLLM-GPU-shaped Kineto traces (tests/helpers/kineto_gpu.py: CUDA-graph decode,
eager prefill, NCCL all-reduces) of ``--mb`` MB uncompressed per rank
(default 200). Every step gets its own traces (another seed), as a run's
steps do.

Each tool runs in a fresh child process (``bench_trace_tools.run_child``:
wall seconds, peak RSS of the process tree):

- **summary**: ``rlprof summary ROOT``, the streaming pass the report reuses;
- **report, cold**: ``rlprof report ROOT --no-cache``: every step read;
- **report, warm**: one more step is added, then ``rlprof report ROOT``
  with the cache of the run before: only the new step is read.
  Goals (issue 33): cold <= 1.2x summary, warm <= 0.1x summary cold.

Then the page: its size, and its load time in headless Chromium (Playwright
on Debian's ``chromium``, the navigation's duration, median of 3), for this
root and for a 50-step root of small traces (the size goal: under 5 MB).

``--scale N,N,...`` (issue 45) measures the report against the number of
steps instead: roots of N steps x 8 ranks of small rlprof traces (12
iterations a rank, prefill and decode, 40 operators), for each N the cold
run (with ``--no-cache``, and again filling the cache of passes),
the warm run after one more step (goal: <= 1 s), the peak memory of
each (goal: flat in N) and the page (goal: <= 5 MB) with its load time.

``--fleet R,S[;R,S...]`` (issue 55) measures the fleet view: roots of R
replicas (verl's replica folders), each with S measured steps x 8 ranks of
step metrics (``steps/rank<k>.jsonl``, written through the real
``metrics.record.StepRecord``) and 10 traced steps of 8 small rank traces;
for each the cold run, the warm run after one more measured step on every
replica (the median of three such rounds; goal: <= 2 s), the peak memory (goal: flat in replicas and steps)
and the page (goal: <= 10 MB) with its load time.

``--gpu-mix MB[,MB...]`` (issue 56) measures the report on real GPU traces' event mix: a step of 8
ranks, each MB of ``benchmarks/gpu_mix.py``'s traces (a published A100 NCCL rank's events repeated
end to end: 4 streams, NCCL kernels, ``ProfilerStep#N``), the report cold (every rank read, its
device time split by correlation) against reading the same files once (every event decoded, in as
many processes as the report uses: ``--read-once``). Goals: within 1.5x, memory flat in MB.

Usage: ``.venv-vllm/bin/python benchmarks/bench_report.py [--steps N] [--mb MB]``
(``make bench-merge`` runs it with the defaults);
``... bench_report.py --scale 250,500,1000 --json F`` (``make bench-report-scale``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))  # after site-packages: rlprof_plugins is the installed wheel

from benchmarks.bench_trace_tools import rlprof, run_child  # noqa: E402
from tests.helpers.browser import open_page  # noqa: E402
from tests.helpers.kineto_gpu import write_gpu_rank  # noqa: E402


def write_step(root: Path, step: int, mb: float) -> Path:
    folder = root / f"global_step_{step}"
    folder.mkdir(parents=True)
    for rank in (0, 1):
        write_gpu_rank(folder / f"rank{rank}.{1795366444000000000 + step}.pt.trace.json.gz", rank=rank,
                       megabytes=mb, seed=step, level=3)
    return folder


def write_small_step(root: Path, step: int, ranks: int = 8, iterations: int = 12) -> None:
    """One step of ``ranks`` small rank traces: 2 prefills then decodes, 40 operators, rank 3 a little slower."""
    folder = root / f"global_step_{step}"
    folder.mkdir(parents=True)
    for rank in range(ranks):
        events, ts = [], 1000.0
        for k in range(iterations):
            stage = "prefill" if k < 2 else "decode"
            dur = (9000.0 if stage == "prefill" else 2000.0) * (1.1 if rank == 3 else 1.0) * (1 + (step % 5) / 50)
            events.append({"ph": "X", "cat": "user_annotation", "pid": rank, "tid": 1, "ts": ts, "dur": dur,
                           "name": f"rlprof::iteration {k} [{stage}] prefill_tokens={64 if k < 2 else 0} "
                                   f"decode_tokens={0 if k < 2 else 4} batch=4"})
            for op in range(40):
                events.append({"ph": "X", "cat": "cpu_op", "pid": rank, "tid": 1, "name": f"aten::op{op}",
                               "ts": ts + 1 + op * dur / 41, "dur": dur / 45})
            ts += dur + 300
        (folder / f"rank{rank}.{1795366444000000000 + step}.pt.trace.json.gz").write_bytes(
            gzip.compress(json.dumps({"traceEvents": events}).encode(), compresslevel=1))


def scale(counts: list[int], work: Path) -> list[dict]:
    """The report against the number of steps: cold, warm after one more step, memory, page."""
    out = []
    for n in counts:
        root = work / f"scale-{n}"
        for step in range(1, n + 1):
            write_small_step(root, step)
        cold = run_child(rlprof("report", str(root), "--no-cache", "-q"))
        filling = run_child(rlprof("report", str(root), "-q"), repeat=1)  # cold too, filling the caches
        write_small_step(root, n + 1)
        warm = run_child(rlprof("report", str(root), "-q"), repeat=1)
        again = run_child(rlprof("report", str(root), "-q"), repeat=3)  # nothing new: the cache alone
        row = {"steps": n, "ranks": 8, "cold": cold, "cold_filling_cache": filling, "warm_one_new_step": warm,
               "warm_nothing_new": again,
               **page_numbers(root / "report.html")}
        print(json.dumps({k: v for k, v in row.items()}), flush=True)
        out.append(row)
        shutil.rmtree(root, ignore_errors=True)
    return out


def write_measured(folder: Path, first: int, last: int, ranks: int = 8, slow: float = 1.0) -> None:
    """Step metrics of steps ``first``..``last`` for ``ranks`` ranks, appended as the engines append them."""
    from rlprof_plugins.metrics.record import BUCKETS_MS, StageRecord, StepRecord

    (folder / "steps").mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        lines = []
        for step in range(first, last + 1):
            counts = [0] * len(BUCKETS_MS)
            counts[3], counts[6] = 200, 2
            decode = StageRecord(202, round(600.0 * slow * (1 + (step % 7) / 50), 3), 20.0 * slow, 0, 808, 808, counts)
            prefill = StageRecord(2, round(18.0 * slow, 3), 9.5 * slow, 256, 0, 8, [0] * 4 + [2] + [0] * 10)
            lines.append(StepRecord(step, "weight_version", f"rank{rank}", 1000.0 + step, 1001.0 + step, 204,
                                    decode.total_ms + prefill.total_ms, 300.0,
                                    {"decode": decode, "prefill": prefill}).encode())
        with (folder / "steps" / f"rank{rank}.jsonl").open("a") as f:
            f.write("".join(lines))


WARM_ROUNDS = 3


def write_fleet(root: Path, replicas: int, steps: int) -> range:
    """verl's replica folders below ``root``: ``steps`` measured steps each (replica 7 1.3x slower), the last
    ten of them traced too. Returns the traced steps."""
    traced = range(steps - 9, steps + 1)
    for r in range(replicas):
        folder = root / f"agent_loop_rollout_replica_{r}"
        write_measured(folder, 1, steps, slow=1.3 if r == 7 else 1.0)
        for step in traced:
            write_small_step(folder, step)
    return traced


def rlprof_of_tree(tree: str, *args: str) -> list[str]:
    """``rlprof ARGS`` run from the source tree ``tree`` (the installed packages after it): two releases side
    by side in one run."""
    site = next(p for p in sys.path if p.endswith("site-packages"))
    boot = (f"import sys; sys.path.insert(0, {tree!r}); sys.path.append({site!r}); "
            "from rlprof_plugins.cli.command import main; sys.exit(main(sys.argv[1:]))")
    return [sys.executable, "-S", "-c", boot, *args]


def fleet(shapes: list[tuple[int, int]], work: Path) -> list[dict]:
    """The fleet view against replicas and steps: cold, warm after one more step everywhere, memory, page."""
    out = []
    for replicas, steps in shapes:
        root = work / f"fleet-{replicas}x{steps}"
        traced = write_fleet(root, replicas, steps)
        cold = run_child(rlprof("report", str(root), "--no-cache", "-q"))
        run_child(rlprof("report", str(root), "-q"))  # fills the cache
        rounds = []  # three rounds of one more measured step on every replica, then the report: their median
        for extra in range(1, WARM_ROUNDS + 1):
            for r in range(replicas):
                write_measured(root / f"agent_loop_rollout_replica_{r}", steps + extra, steps + extra)
            rounds.append(run_child(rlprof("report", str(root), "-q"), repeat=1))
        warm = {"seconds": sorted(r["seconds"] for r in rounds)[len(rounds) // 2],
                "peak_mb": max(r["peak_mb"] for r in rounds), "runs": [r["seconds"] for r in rounds]}
        row = {"replicas": replicas, "measured_steps": steps, "traced_steps": len(traced), "ranks": 8, "cold": cold,
               "warm_one_new_step": warm, **page_numbers(root / "report.html")}
        print(json.dumps(row), flush=True)
        out.append(row)
        shutil.rmtree(root, ignore_errors=True)
    return out


def gpu_mix(sizes: list[float], work: Path) -> list[dict]:
    """The report on 8 ranks of real-GPU-mix traces against reading them once, per size."""
    from benchmarks.gpu_mix import write_rank

    out = []
    for mb in sizes:
        step = work / f"gpu-mix-{mb:g}" / "global_step_1"
        step.mkdir(parents=True)
        t = time.perf_counter()
        files = []
        for rank in range(8):
            files.append(step / f"gpu-node_{7000 + rank}.1680000000000000000.pt.trace.json")
            write_rank(files[-1], rank, 8, mb)
        print(f"input: 8 ranks x {mb:g} MB, written in {time.perf_counter() - t:.0f} s", flush=True)
        read = run_child([sys.executable, str(Path(__file__)), "--read-once", *map(str, files)])
        report = run_child(rlprof("report", str(step.parent), "--no-cache", "-q"))
        row = {"ranks": 8, "mb_per_rank": mb, "read_once": read, "report_cold": report,
               "ratio": round(report["seconds"] / read["seconds"], 2)}
        print(json.dumps(row), flush=True)
        out.append(row)
        shutil.rmtree(step.parent, ignore_errors=True)
    return out


def read_once(files: list[str]) -> int:
    """Every event of every file decoded once, in as many processes as the report would use: the floor."""
    from rlprof_plugins._parallel import pool, processes_for
    from rlprof_plugins.trace.format.gz import file_size

    processes = processes_for(len(files), sum(file_size(Path(f)) for f in files))
    with pool(processes) as workers:
        print(sum(workers.map(_count_events, files)), "events")
    return 0


def _count_events(path: str) -> int:
    from rlprof_plugins.trace.format.codec import gc_paused
    from rlprof_plugins.trace.format.reader import TraceReader

    with TraceReader(Path(path)) as reader, gc_paused():
        return sum(len(batch) for batch in reader.batches())


def page_numbers(page: Path) -> dict:
    loads = sorted(open_page(page).load_ms for _ in range(3))
    return {"page_kb": round(page.stat().st_size / 1024, 1), "load_ms": round(loads[1], 1)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--mb", type=float, default=200.0)
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--scale", help="comma-separated step counts: the report against the number of steps")
    parser.add_argument("--fleet", help="replicas,steps[;replicas,steps...]: the fleet view against both")
    parser.add_argument("--gpu-mix", help="MB[,MB...] per rank: 8 ranks of a real GPU trace's event mix")
    parser.add_argument("--read-once", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.read_once:
        return read_once(args.read_once)
    work = Path(tempfile.mkdtemp(prefix="rlprof-bench-report-"))
    try:
        if args.gpu_mix:
            rows = gpu_mix([float(mb) for mb in args.gpu_mix.split(",")], work)
            if args.json:
                Path(args.json).write_text(json.dumps(rows, indent=1))
            return 0
        if args.scale or args.fleet:
            rows = scale([int(n) for n in args.scale.split(",")], work) if args.scale else fleet(
                [tuple(int(x) for x in shape.split(",")) for shape in args.fleet.split(";")], work)
            if args.json:
                Path(args.json).write_text(json.dumps(rows, indent=1))
            return 0
        root = work / "root"
        t = time.perf_counter()
        for step in range(1, args.steps + 1):
            write_step(root, step, args.mb)
        gz_mb = sum(p.stat().st_size for p in root.rglob("*.gz")) / 1e6
        print(f"input: {args.steps} steps x 2 ranks x {args.mb:.0f} MB ({gz_mb:,.0f} MB gzip), "
              f"written in {time.perf_counter() - t:.0f} s", flush=True)
        out = {"steps": args.steps, "mb_per_rank": args.mb, "input_gz_mb": round(gz_mb, 1)}
        out["summary"] = run_child(rlprof("summary", str(root)))
        out["report_cold"] = run_child(rlprof("report", str(root), "--no-cache"))
        run_child(rlprof("report", str(root)))  # fills the cache
        write_step(root, args.steps + 1, args.mb)
        out["report_warm_one_new_step"] = run_child(rlprof("report", str(root)))
        out["page"] = page_numbers(root / "report.html")
        small = work / "small"
        for step in range(1, 51):
            write_step(small, step, 4.0)
        run_child(rlprof("report", str(small)))
        out["page_50_steps_4mb"] = page_numbers(small / "report.html")
        summary = out["summary"]["seconds"]
        out["cold_ratio"] = round(out["report_cold"]["seconds"] / summary, 2)
        out["warm_ratio"] = round(out["report_warm_one_new_step"]["seconds"] / summary, 2)
        print(json.dumps(out, indent=1))
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
