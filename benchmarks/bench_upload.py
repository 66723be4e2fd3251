"""Benchmark: uploading a step's files to an object store, and what the upload costs the engine.

The store is a real S3 server on the loopback (SeaweedFS, ``tests/helpers/seaweedfs.py``), scheduled only on
CPU time nothing else wants and keeping its data in memory: it stands for a store on another machine, whose
CPU and disk are not the engine node's. Two measures, each
side by side in one run:

- **Upload**: at full speed (``RLPROF_UPLOAD_MBPS=0``), a step folder as several ranks write it (``RANKS`` rank traces, each with its by-stage
  traces, a merged trace: about 100 MB, incompressible as gzip traces are) sent by rlprof's uploader
  (``store.upload``: one pass over the spool folder, the manifest last) against fsspec's own recursive copy
  of the same folder (``fs.put(..., recursive=True)``), rounds alternating, each to a fresh prefix.
- **The engine while it uploads**: a real server (``--engine vllm|sglang``, TP=1) whose output folder is
  an ``s3://`` URI plays RL rollout steps (``tests/helpers/rollout.py``; ``STEP_ROLLOUTS`` of them back to
  back) with nothing to upload, then the same while its uploader sends such a step folder at its default rate (dropped into the spool just before the step
  starts), rounds alternating; generation time (first request sent to last answer) of each, medians, and
  whether the upload overlapped the step.

Usage: ``python benchmarks/bench_upload.py [--engine vllm|sglang] [--rounds 5] [--out F]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))  # after site-packages: rlprof_plugins is the installed wheel, tests/ comes from here

from tests.helpers.rollout import SGLANG_FLAGS, VLLM_FLAGS, rollout, rollout_plan  # noqa: E402
from tests.helpers.seaweedfs import SeaweedS3  # noqa: E402
from rlprof_plugins.store import destination, manifest, upload  # noqa: E402

# rollouts played back to back as the measured work, so that it lasts about as long as the upload
STEP_ROLLOUTS = {"vllm": 6, "sglang": 1}
RANKS = 4
RANK_MB = 12  # each rank's trace; its by-stage traces together hold as much again
MERGED_MB = 4


def make_step_folder(root: Path, step: int) -> Path:
    """A step folder as ``RANKS`` ranks write it with by-stage traces and a merged trace (about 100 MB)."""
    folder = root / f"global_step_{step}"
    for r in range(RANKS):
        rank = f"rank{r}"
        for name, mb in ((f"{rank}.pt.trace.json.gz", RANK_MB), (f"{rank}.prefill.pt.trace.json.gz", RANK_MB // 3),
                         (f"{rank}.decode.pt.trace.json.gz", RANK_MB - RANK_MB // 3)):
            path = folder / "ranks" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(os.urandom(mb * 2**20))
        manifest.update(folder, session_id=f"bench-{step}", writer=rank,
                        section={"role": "worker", "state": "done", "files": [{"path": f"ranks/{rank}.pt.trace.json.gz"}]},
                        header={"expected_ranks": RANKS, "engine": "bench", "nodes": 1})
    (folder / "merged.pt.trace.json.gz").write_bytes(os.urandom(MERGED_MB * 2**20))
    return folder


def folder_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def upload_rounds(s3: SeaweedS3, tmp: Path, rounds: int) -> dict:
    """rlprof's uploader against fsspec's own recursive copy of the same step folder, rounds alternating."""
    os.environ[destination.SPOOL_ENV] = str(tmp / "spool")
    previous = os.environ.get(upload.RATE_ENV)
    os.environ[upload.RATE_ENV] = "0"  # the two copies at full speed; the engine's uploader keeps its default
    fs = s3.client()
    runs: dict = {"rlprof uploader": [], "fsspec put, recursive": []}
    for k in range(rounds):
        for label in (list(runs) if k % 2 == 0 else list(runs)[::-1]):
            uri = s3.uri(f"bench-upload/{label.split()[0]}-{k}")
            spool = destination.open_destination(uri).spool
            folder = make_step_folder(spool, k)
            size = folder_mb(folder)
            t = time.perf_counter()
            if label == "rlprof uploader":
                result = upload.Uploader(destination.destination_at(spool)).run_pass()
                assert result.ok and not result.pending, result.failed
            else:
                fs.put(str(folder), f"{uri.removeprefix('s3://')}/{folder.name}", recursive=True)
            seconds = time.perf_counter() - t
            runs[label].append({"seconds": seconds, "mb": size, "mb_per_s": size / seconds})
            print(f"  upload round {k + 1}/{rounds}, {label}: {size:.0f} MB in {seconds:.2f} s", flush=True)
            shutil.rmtree(spool)
    if previous is None:
        del os.environ[upload.RATE_ENV]
    else:
        os.environ[upload.RATE_ENV] = previous
    return runs


def generation_rounds(s3: SeaweedS3, tmp: Path, engine: str, rounds: int) -> dict:
    """A real server writing to ``s3://``: a rollout step with nothing uploading, then one while its uploader
    sends a step folder, rounds alternating."""
    from tests.helpers import sglang_server, vllm_server

    uri = s3.uri(f"bench-engine-{engine}")
    env = {**s3.env(), destination.SPOOL_ENV: str(tmp / "engine-spool")}
    if engine == "vllm":
        server = vllm_server.start_server(tmp, {"profiler": "torch", "torch_profiler_dir": uri}, env=env,
                                          extra=VLLM_FLAGS, timeout=600)
    else:
        server = sglang_server.start_server(tmp, {"torch_profiler_dir": uri}, env=env, extra=SGLANG_FLAGS,
                                            timeout=600)
    os.environ[destination.SPOOL_ENV] = env[destination.SPOOL_ENV]
    spool = destination.spool_folder(uri)
    plan = rollout_plan()
    runs: dict = {"nothing uploading": [], "uploading a step folder": []}
    try:
        rollout(server, engine, rollout_plan(1))  # warm-up
        for k in range(rounds):
            for label in (list(runs) if k % 2 == 0 else list(runs)[::-1]):
                out: dict = {}
                # both cases write the same step folder just before (the same writes for the disk to flush);
                # only one of them puts it where the uploader sends it
                staging = make_step_folder(tmp / "staging" / str(k) / label[:7], 100 + k)
                os.sync()  # on disk before the step: what the step shares the machine with is the upload alone
                if label == "uploading a step folder":
                    target = spool / staging.name
                    os.replace(staging, target)  # appears whole, as a finished step folder does
                    out["mb"] = folder_mb(target)
                t = time.perf_counter()
                out["generation_s"] = sum(rollout(server, engine, plan) for _ in range(STEP_ROLLOUTS[engine]))
                step_end = time.perf_counter()
                if label == "uploading a step folder":
                    while (manifest.read(target) or {}).get("upload", {}).get("state") != "done":
                        assert time.perf_counter() - t < 600, manifest.read(target)
                        time.sleep(0.05)
                    out["upload_done_after_s"] = time.perf_counter() - t
                    out["overlapped"] = out["upload_done_after_s"] > 0.5 and time.perf_counter() - step_end < 600
                runs[label].append(out)
                print(f"  engine round {k + 1}/{rounds}, {label}: generation {out['generation_s']:.2f} s"
                      + (f", upload done {out['upload_done_after_s']:.1f} s after the step began" if "mb" in out else ""),
                      flush=True)
    finally:
        server.stop()
    return runs


def median(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def summarise(uploads: dict, engine_runs: dict) -> dict:
    ours, theirs = uploads["rlprof uploader"], uploads["fsspec put, recursive"]
    quiet, busy = engine_runs["nothing uploading"], engine_runs["uploading a step folder"]
    return {
        "upload_mb": median(ours, "mb"),
        "rlprof_s": median(ours, "seconds"), "fsspec_s": median(theirs, "seconds"),
        "rlprof_vs_fsspec_x": median(ours, "seconds") / median(theirs, "seconds"),
        "generation_quiet_s": median(quiet, "generation_s"), "generation_uploading_s": median(busy, "generation_s"),
        "generation_x": median(busy, "generation_s") / median(quiet, "generation_s"),
        "generation_x_per_round": [round(b["generation_s"] / q["generation_s"], 3) for q, b in zip(quiet, busy)],
        "upload_done_after_s": median(busy, "upload_done_after_s"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", choices=("vllm", "sglang"), default="vllm")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out")
    args = parser.parse_args()
    # the server's uploader may still be finishing when the folder goes: what it leaves is not the run's
    with tempfile.TemporaryDirectory(prefix="rlprof-bench-upload-", ignore_cleanup_errors=True) as tmp_text:
        tmp = Path(tmp_text)
        # a store elsewhere: its CPU time is what the engine leaves, its disk not this node's (memory)
        store_data = Path(tempfile.mkdtemp(prefix="rlprof-bench-store-", dir="/dev/shm"))
        s3 = SeaweedS3(tmp / "seaweedfs", idle=True, data=store_data)
        os.environ.update(s3.env())  # the credentials' standard chain, as a job sets it
        try:
            uploads = upload_rounds(s3, tmp, args.rounds)
            engine_runs = generation_rounds(s3, tmp, args.engine, args.rounds)
        finally:
            s3.stop()
            shutil.rmtree(store_data, ignore_errors=True)
        summary = summarise(uploads, engine_runs)
        print(json.dumps(summary, indent=2))
        if args.out:
            Path(args.out).write_text(json.dumps({"engine": args.engine, "rounds": args.rounds, "summary": summary,
                                                  "uploads": uploads, "engine_runs": engine_runs}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
