"""Benchmark: ``rlprof report --ray`` against the local report on the same GPU-shaped files (issue 70).

Input: 4 simulated nodes, each holding one replica (verl's layout,
``agent_loop_rollout_replica_<r>/global_step_<N>/``) of ``--steps`` steps
(default 10) x 8 ranks of ``benchmarks/gpu_mix.py``'s traces (a published
A100 NCCL rank's events repeated: the smallest it writes is one whole copy,
28 MB), each step folder with a manifest as rlprof writes it. The 8 rank
files are written once and hard-linked into every step of every node (the
same bytes on disk for both runs: the page cache serves both alike).

The cluster is Ray's own on this machine (``tests/helpers/ray_cluster.py``:
one node per simulated node, 1 CPU each, all on ``127.0.0.2``), each node
told only its own folder (``FLEET_NODE``). Measured, each in a fresh child
process (``bench_trace_tools.run_child``: wall seconds, peak RSS of its tree):

- **local**: ``rlprof report ALL --json`` over one root holding every node's
  files, its cache empty (the process pool on this machine's cores);
- **ray, cold**: ``rlprof report '.../$FLEET_NODE/save_path' --ray ADDR
  --json``, the nodes' caches empty: every trace read on its node; the driver's memory
  (its process alone: the nodes' workers are the cluster's), the cluster's
  peak memory beside it, ``analysis.bytes_returned`` against
  ``analysis.trace_bytes``, the sum of the passes' seconds on the nodes;
- **ray, warm**: the same with the nodes' caches of passes.

The two JSONs are checked to be the same report (``analysis`` and the root
apart). This machine has 2 cores, so 4 one-CPU nodes share them: the wall
times compare the two paths' overheads, not what 4 machines would do; the
model in docs/performance.md takes the per-trace pass measured here.

Usage: ``.venv-vllm/bin/python benchmarks/bench_report_ray.py [--steps N] [--json FILE]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))  # after site-packages: rlprof_plugins is the installed wheel, tests/ comes from here

from benchmarks.bench_trace_tools import _tree_rss_kb, run_child  # noqa: E402
from benchmarks.gpu_mix import write_rank  # noqa: E402
from tests.helpers.ray_cluster import RayCluster, comparable, ray_environment  # noqa: E402

RLPROF = Path(sys.executable).parent / "rlprof"
NODES, RANKS = 4, 8
MANIFEST = REPO / "tests" / "fixtures" / "vllm-0.32-cpu-tp2" / "global_step_3" / "manifest.json"


def lay_out(work: Path, steps: int) -> tuple[Path, str, int]:
    """The 8 rank files, linked into every node's replica and into the local root; returns (local root,
    the nodes' root template, bytes of one rank file)."""
    source = work / "ranks"
    source.mkdir(parents=True)
    for rank in range(RANKS):
        write_rank(source / f"rank{rank}.pt.trace.json", rank, RANKS, 1)
    manifest = json.loads(MANIFEST.read_text())
    for node in range(NODES):
        replica = f"agent_loop_rollout_replica_{node}"
        for step in range(1, steps + 1):
            for top in (work / f"node{node}" / "save_path", work / "all" / "save_path"):
                folder = top / replica / f"global_step_{step}"
                (folder / "ranks").mkdir(parents=True)
                files = []
                for rank in range(RANKS):
                    name = f"ranks/rank{rank}.{1680000000000000000 + step}.pt.trace.json"
                    os.link(source / f"rank{rank}.pt.trace.json", folder / name)
                    files.append({"bytes": (folder / name).stat().st_size, "kind": "trace", "path": name,
                                  "rank": f"rank{rank}", "role": "worker", "stage": "all"})
                (folder / "manifest.json").write_text(json.dumps(
                    {**manifest, "files": files, "global_step": step, "expected_ranks": RANKS,
                     "parallel": {"tp": RANKS, "pp": 1, "dp": 1}, "writers": {}, "nodes": {}}))
    return work / "all" / "save_path", f"{work}/$FLEET_NODE/save_path", (source / "rank0.pt.trace.json").stat().st_size


def cluster_peak(pid: int, stop: threading.Event, peak: list[int]) -> None:
    while not stop.wait(0.1):
        peak[0] = max(peak[0], _tree_rss_kb(pid))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rlprof-bench-ray-"))
    try:
        t = time.perf_counter()
        local_root, template, rank_bytes = lay_out(work, args.steps)
        traces = NODES * RANKS * args.steps
        print(f"input: {NODES} nodes x {RANKS} ranks x {args.steps} steps = {traces} traces of "
              f"{rank_bytes / 1e6:.1f} MB ({traces * rank_bytes / 1e9:.1f} GB), laid out in "
              f"{time.perf_counter() - t:.0f} s", flush=True)
        local = run_child([str(RLPROF), "report", str(local_root), "-q", "--json", str(work / "local.json"),
                           "-o", str(work / "local.html")], cwd=work)
        print("local", json.dumps(local), flush=True)
        spec = {f"node{n}": {"env": {"FLEET_NODE": f"node{n}"}} for n in range(NODES)}
        results = {}
        with RayCluster(spec, work) as cluster:
            for name in ("ray_cold", "ray_warm"):
                stop, peak = threading.Event(), [0]
                sampler = threading.Thread(target=cluster_peak, args=(cluster.proc.pid, stop, peak), daemon=True)
                sampler.start()
                run = run_child([str(RLPROF), "report", template, "--ray", cluster.address, "-q",
                                 "--json", str(work / f"{name}.json"), "-o", str(work / f"{name}.html")],
                                env=ray_environment(), cwd=work)
                stop.set()
                sampler.join()
                data = json.loads((work / f"{name}.json").read_text())
                a = data["analysis"]
                run.update(cluster_peak_mb=round(peak[0] / 1024), analysis=a,
                           returned_pct=round(100 * a["bytes_returned"] / a["trace_bytes"], 4),
                           same_as_local=comparable(data) == comparable(json.loads((work / "local.json").read_text())))
                results[name] = run
                print(name, json.dumps({k: v for k, v in run.items() if k != "analysis"}),
                      json.dumps({k: a[k] for k in ("nodes", "trace_bytes", "bytes_returned", "node_cache_hits",
                                                    "seconds")}), flush=True)
        out = {"nodes": NODES, "ranks": RANKS, "steps": args.steps, "traces": traces, "rank_bytes": rank_bytes,
               "cores": os.cpu_count(), "local": local, **results,
               "ray_over_local": round(results["ray_cold"]["seconds"] / local["seconds"], 2),
               "per_trace_pass_s": round(results["ray_cold"]["analysis"]["seconds"]["on_nodes"] / traces, 3)}
        print(json.dumps({k: v for k, v in out.items() if k not in ("ray_cold", "ray_warm", "local")}), flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=1))
        ok = all(r["same_as_local"] and r["returned_pct"] < 1.0 for r in results.values())
        return 0 if ok else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
