"""Benchmark: how long SGLang's scheduler is held by a profile stop, native vs rlprof.

One SGLang 0.5.23 server (CPU, tiny model, plugin installed, no rlprof
configuration), so both paths run on the same process in one run:

- native: ``{"output_dir": D, "activities": ["CPU"], "with_stack": W}``
  (no rlprof field: SGLang's own profiler; its stop exports the trace on the
  scheduler thread before answering);
- rlprof: the same plus ``"global_step": N`` (rlprof's session; the stop is
  answered first and the export runs on a background thread).

Each round records the same traffic (4 concurrent 64-token requests), then
stops while one 64-token completion streams; we report the ``/stop_profile``
latency and that completion's largest gap between streamed tokens, with
stacks on and off, as ratios. Usage:
``.venv-vllm/bin/python benchmarks/bench_sglang_stop.py`` (``make bench-sglang``, ~3 min).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))  # after site-packages: rlprof_plugins is the installed wheel, tests/ comes from here

from tests.helpers.sglang_server import start_server  # noqa: E402

ROUNDS = 3
TOKENS = 64


def stream_gaps(url: str, out: dict) -> None:
    """One streamed completion; the largest gap between its chunks (ms)."""
    body = {"text": "the rollout engine", "stream": True,
            "sampling_params": {"max_new_tokens": TOKENS, "ignore_eos": True, "temperature": 0}}
    last, gaps = None, []
    with requests.post(url + "/generate", json=body, stream=True, timeout=300) as r:
        for line in r.iter_lines():
            if not line:
                continue
            now = time.perf_counter()
            if last is not None:
                gaps.append(now - last)
            last = now
    out["max_gap_ms"] = 1000 * max(gaps) if gaps else float("nan")


def one_round(server, body: dict) -> dict:
    r = server.post("/start_profile", body)
    assert r.status_code == 200, r.text
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: server.complete(f"prompt {i}", max_tokens=TOKENS), range(4)))
    streamed: dict = {}
    t = threading.Thread(target=stream_gaps, args=(server.url, streamed))
    t.start()
    time.sleep(0.3)  # the stream is under way
    t0 = time.perf_counter()
    stop = server.post("/stop_profile")
    latency = time.perf_counter() - t0
    assert stop.status_code == 200, stop.text
    t.join()
    if "global_step" in body:
        assert server.wait_state(timeout=300)["state"] == "done"
    return {"stop_s": latency, "max_gap_ms": streamed["max_gap_ms"]}


def main() -> int:
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        server = start_server(tmp, None)
        try:
            server.complete(max_tokens=8)  # warm up
            idle: dict = {}
            stream_gaps(server.url, idle)
            results["no_profiling_max_gap_ms"] = idle["max_gap_ms"]
            step = 0
            for stack in (True, False):
                for path in ("native", "rlprof"):
                    runs = []
                    for _ in range(ROUNDS):
                        body = {"output_dir": str(tmp / "traces"), "activities": ["CPU"], "with_stack": stack}
                        if path == "rlprof":
                            step += 1
                            body["global_step"] = step
                        runs.append(one_round(server, body))
                    results[f"{path}_stack_{'on' if stack else 'off'}"] = {
                        "stop_s": statistics.median(r["stop_s"] for r in runs),
                        "max_gap_ms": statistics.median(r["max_gap_ms"] for r in runs),
                    }
        finally:
            server.stop()
    print(json.dumps(results, indent=2))
    for stack in ("on", "off"):
        n, r = results[f"native_stack_{stack}"], results[f"rlprof_stack_{stack}"]
        print(f"stacks {stack}: /stop_profile native {n['stop_s']:.2f} s vs rlprof {r['stop_s']:.2f} s "
              f"({n['stop_s'] / max(r['stop_s'], 1e-3):.1f}x); largest token gap native {n['max_gap_ms']:.0f} ms "
              f"vs rlprof {r['max_gap_ms']:.0f} ms (no profiling {results['no_profiling_max_gap_ms']:.0f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
