"""Benchmark: the engine's largest stall while a long session records and stops.

torch's own ``profiler.stop()`` post-processes everything it recorded on the
thread that recorded (seconds with Python stacks on). Measured in one run, one
server at a time, for native vLLM (``RLPROF_DISABLE=1``), rlprof with one
torch session, and rlprof with ``chunk_iterations`` N (several N):

- the largest gap between streamed tokens from the start of recording until
  the stop has returned and the files are written (chunk stops fall inside
  the recording), against the same streams with no profiling;
- tokens/s while recording;
- torch's stops on the engine thread: their number, the longest, the total
  (the session's status), and the trace's size.

The session records about ``ITERATIONS`` engine iterations (one stream at a
time, 128 tokens each) before the stop. The engine is vLLM's (``make bench``
runs it; ``--engine sglang`` the SGLang server, ``make bench-sglang``).
Usage: ``python benchmarks/bench_stop_stall.py [--engine vllm|sglang] [--chunks 16,32,64]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))  # after site-packages: rlprof_plugins is the installed wheel, tests/ comes from here

STREAM_TOKENS = 128
ITERATIONS = 256  # recorded before the stop: two streams of 128 tokens


def stream_once(server, engine: str) -> tuple[float, list[float], int]:
    """One streamed completion: (seconds, gaps between consecutive tokens, tokens)."""
    if engine == "vllm":
        from tests.helpers.vllm_server import TINY_MODEL

        path, body = "/v1/completions", {"model": str(TINY_MODEL), "prompt": "the rollout engine",
                                          "max_tokens": STREAM_TOKENS, "stream": True, "ignore_eos": True,
                                          "temperature": 0}
    else:
        path, body = "/generate", {"text": "the rollout engine", "stream": True, "sampling_params": {
            "max_new_tokens": STREAM_TOKENS, "ignore_eos": True, "temperature": 0}}
    t0 = time.perf_counter()
    arrivals = [t0]
    with requests.post(server.url + path, json=body, stream=True, timeout=1800) as r:
        for line in r.iter_lines():
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                arrivals.append(time.perf_counter())
    return arrivals[-1] - t0, [b - a for a, b in zip(arrivals, arrivals[1:])], len(arrivals) - 1


def busy(server) -> bool:
    r = server.get("/profile_status")
    return r.status_code == 200 and r.json().get("state") in ("recording", "exporting")


def one_session(server, engine: str, body: dict) -> dict:
    """Record ~ITERATIONS iterations of back-to-back streams, then stop while
    streaming on; every gap from the start request to the written files."""
    assert server.post("/start_profile", body).status_code == 200
    gaps: list[float] = []
    tokens, t0 = 0, time.perf_counter()
    while tokens < ITERATIONS:
        _, g, n = stream_once(server, engine)
        gaps += g
        tokens += n
    recording_tps = tokens / (time.perf_counter() - t0)
    stop_s: list[float] = []

    def stop():
        t = time.perf_counter()
        requests.post(server.url + "/stop_profile", timeout=1800)
        stop_s.append(time.perf_counter() - t)

    stopper = threading.Thread(target=stop)
    stopper.start()
    deadline = time.time() + 1800
    while time.time() < deadline:
        _, g, _ = stream_once(server, engine)
        gaps += g
        if not stopper.is_alive() and not busy(server):
            break
    stopper.join()
    status = server.get("/profile_status").json()
    ranks = status.get("ranks") or [{}]
    return {"max_gap_s": max(gaps), "recording_tokens_per_s": recording_tps, "stop_answer_s": stop_s[0],
            "stops": ranks[0].get("stops"), "longest_stop_s": ranks[0].get("longest_stop_seconds"),
            "total_stop_s": ranks[0].get("stop_seconds"), "export_s": ranks[0].get("export_seconds")}


def no_profiling(server, engine: str) -> dict:
    gaps, tokens, t0 = [], 0, time.perf_counter()
    while tokens < ITERATIONS:
        _, g, n = stream_once(server, engine)
        gaps += g
        tokens += n
    return {"max_gap_s": max(gaps), "tokens_per_s": tokens / (time.perf_counter() - t0)}


def measure_vllm(tmp: Path, with_stack: bool, chunks: list[int], rounds: int) -> dict:
    """Native vLLM (the plugin off) and rlprof: one server each, one at a time."""
    from tests.helpers.vllm_server import start_server

    key = "stack" if with_stack else "nostack"
    out: dict = {}
    for native in (True, False):
        config = {"profiler": "torch", "torch_profiler_dir": str(tmp / f"{native}-{key}"),
                  "torch_profiler_with_stack": with_stack}
        server = start_server(tmp, config, env={"RLPROF_DISABLE": "1"} if native else {})
        try:
            stream_once(server, "vllm")  # warm-up
            out["none" if native else "rlprof none"] = [no_profiling(server, "vllm") for _ in range(rounds)]
            if native:
                out["native"] = [one_session(server, "vllm", {}) for _ in range(rounds)]
                continue
            for n in [0, *chunks]:
                out["rlprof" if n == 0 else f"rlprof chunks of {n}"] = [
                    one_session(server, "vllm", {"chunk_iterations": n}) for _ in range(rounds)]
        finally:
            server.stop()
    return out


def measure_sglang(tmp: Path, with_stack: bool, chunks: list[int], rounds: int) -> dict:
    """One unconfigured SGLang server: native requests reach SGLang's own
    profiler, requests with a global step rlprof's (docs/sglang.md)."""
    from tests.helpers.sglang_server import start_server

    native = {"output_dir": str(tmp / "traces"), "activities": ["CPU"], "with_stack": with_stack}
    out: dict = {}
    server = start_server(tmp, None)
    try:
        stream_once(server, "sglang")
        out["none"] = [no_profiling(server, "sglang") for _ in range(rounds)]
        out["native"] = [one_session(server, "sglang", native) for _ in range(rounds)]
        step = 0
        for n in [0, *chunks]:
            runs = []
            for _ in range(rounds):
                step += 1
                runs.append(one_session(server, "sglang", {**native, "global_step": step, "chunk_iterations": n}))
            out["rlprof" if n == 0 else f"rlprof chunks of {n}"] = runs
    finally:
        server.stop()
    return out


def render(results: dict) -> str:
    med = statistics.median
    lines = ["| stacks | recorder | largest token gap, recording + stop | vs no profiling | tokens/s recording "
             "| torch stops on the engine thread: n, longest, total |", "| --- | --- | --- | --- | --- | --- |"]
    for key, title in (("stack", "on"), ("nostack", "off")):
        r = results[key]
        idle = med(x["max_gap_s"] for x in r["none"])
        for label, runs in r.items():
            if label in ("none", "rlprof none"):
                continue
            gap = med(x["max_gap_s"] for x in runs)
            stops = ("-" if runs[0]["stops"] is None else
                     f"{med(x['stops'] for x in runs):.0f}, {med(x['longest_stop_s'] for x in runs):.2f} s, "
                     f"{med(x['total_stop_s'] for x in runs):.2f} s")
            lines.append(f"| {title} | {label} | {gap * 1e3:.0f} ms | {gap / idle:.1f}x ({idle * 1e3:.0f} ms) "
                         f"| {med(x['recording_tokens_per_s'] for x in runs):.0f} | {stops} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", choices=("vllm", "sglang"), default="vllm")
    parser.add_argument("--chunks", default="16,32,64", help="chunk lengths to measure (iterations)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    chunks = [int(x) for x in args.chunks.split(",") if x]
    with tempfile.TemporaryDirectory() as d:
        measure = measure_vllm if args.engine == "vllm" else measure_sglang
        results = {key: measure(Path(d), key == "stack", chunks, args.rounds) for key in ("stack", "nostack")}
    out = args.out or REPO / "benchmarks" / f"results-stop-stall-{args.engine}.json"
    out.write_text(json.dumps(results, indent=2))
    print(render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
