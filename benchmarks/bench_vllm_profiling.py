"""Benchmark: what profiling with rlprof costs a vLLM server, vs native vLLM.

Everything is measured in one run on one machine and reported as ratios:

1. ``/stop_profile`` latency, native vLLM (plugin disabled with
   ``RLPROF_DISABLE=1``) vs the plugin, recording the same traffic, with
   stacks on and off. Both answer once the files are on disk (rlprof's
   default, ``stop_wait_seconds``); rlprof with ``{"wait": false}`` too.
2. While ``/stop_profile`` runs and the files are written, completions are
   streamed back to back: their largest gap between tokens and their latency,
   vs the same completions with no profiling.
3. Throughput (tokens/s) with the plugin's worker hook applied but idle vs
   reverted, in one in-process engine, rounds alternating (idle_hook_ab.py).
4. The per-iteration cost of the plugin's worker hook when no session runs
   (the wrapped ``execute_model`` vs the bare method, in-process).

Usage: ``.venv-vllm/bin/python benchmarks/bench_vllm_profiling.py [--out results.json]``
(``make bench``). Takes ~8 minutes on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import timeit
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))  # after site-packages: rlprof_plugins is the installed wheel, tests/ comes from here

from tests.helpers.vllm_server import TINY_MODEL, start_server  # noqa: E402

ROUNDS = 3


def traffic(server, n: int = 4, tokens: int = 16) -> None:
    with ThreadPoolExecutor(n) as pool:
        list(pool.map(lambda k: server.complete(f"the rollout engine {k}", max_tokens=tokens), range(n)))


def wait_done(server, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        r = server.get("/profile_status")
        if r.status_code != 200 or r.json().get("state") in ("done", "failed", "idle"):
            return
        time.sleep(0.2)


def stream_once(server, tokens: int = 128) -> tuple[float, list[float]]:
    """One streamed completion: (seconds, gaps between consecutive tokens)."""
    body = {"model": str(TINY_MODEL), "prompt": "the rollout engine", "max_tokens": tokens, "stream": True,
            "ignore_eos": True, "temperature": 0}
    t0 = time.perf_counter()
    arrivals = [t0]  # the wait for the first token counts as a gap too
    with requests.post(server.url + "/v1/completions", json=body, stream=True, timeout=300) as r:
        for line in r.iter_lines():
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                arrivals.append(time.perf_counter())
    return arrivals[-1] - t0, [b - a for a, b in zip(arrivals, arrivals[1:])]


def exporting(server) -> bool:
    r = server.get("/profile_status")
    return r.status_code == 200 and r.json().get("state") in ("recording", "exporting")


def serve_through_stop(server) -> dict:
    """Stream completions back to back from before ``/stop_profile`` until it
    has returned and the files are written: the largest gap between tokens
    and the completion latencies seen while the engine stops and exports."""
    assert server.post("/start_profile").status_code == 200
    traffic(server)
    stop_s: list[float] = []

    def stop():
        # a native stop with stacks can take minutes on a busy machine: no client timeout here
        t = time.perf_counter()
        requests.post(server.url + "/stop_profile", timeout=1800)
        stop_s.append(time.perf_counter() - t)

    gaps, latencies = [], []
    seconds, g = stream_once(server)  # the stream is running when the stop arrives
    stopper = threading.Thread(target=stop)
    deadline = time.time() + 1800
    stopper.start()
    while time.time() < deadline:
        seconds, g = stream_once(server)
        gaps += g
        latencies.append(seconds)
        if not stopper.is_alive() and not exporting(server):
            break
    stopper.join()
    return {"max_gap_s": max(gaps), "latency_s": statistics.median(latencies), "streams": len(latencies),
            "stop_s": stop_s[0]}


def serve_idle(server, rounds: int = 3) -> dict:
    gaps, latencies = [], []
    for _ in range(rounds):
        seconds, g = stream_once(server)
        gaps += g
        latencies.append(seconds)
    return {"max_gap_s": max(gaps), "latency_s": statistics.median(latencies)}


def measure(tmp: Path, label: str, with_stack: bool) -> dict:
    """One server at a time (two side by side disturb each other on 2 cores)."""
    name = f"{label}{'' if with_stack else '_nostack'}"
    env = {"RLPROF_DISABLE": "1"} if label == "native" else {}
    config = {"profiler": "torch", "torch_profiler_dir": str(tmp / name), "torch_profiler_with_stack": with_stack}
    server = start_server(tmp, config, env=env)
    out: dict = {"stop_s": [], "stop_nowait_s": [], "during_stop": [], "idle": []}
    try:
        traffic(server)  # warm-up
        for _ in range(ROUNDS):
            assert server.post("/start_profile").status_code == 200
            traffic(server)
            t = time.perf_counter()
            assert requests.post(server.url + "/stop_profile", timeout=1800).status_code == 200
            out["stop_s"].append(time.perf_counter() - t)
            wait_done(server)
            if label != "native":  # the answer at once, files written behind it
                assert server.post("/start_profile").status_code == 200
                traffic(server)
                t = time.perf_counter()
                assert server.post("/stop_profile", {"wait": False}).status_code == 200
                out["stop_nowait_s"].append(time.perf_counter() - t)
                wait_done(server)
            out["idle"].append(serve_idle(server))
            out["during_stop"].append(serve_through_stop(server))
            wait_done(server)
        out["trace_bytes"] = [p.stat().st_size for p in (tmp / name).glob("rank0*.pt.trace.json.gz")]
    finally:
        server.stop()
    return out


def idle_hook_ab(tmp: Path, rounds: int = 5) -> dict:
    import subprocess

    from tests.helpers.vllm_server import cpu_env

    script = Path(__file__).with_name("idle_hook_ab.py")
    proc = subprocess.run([sys.executable, str(script), str(TINY_MODEL), str(tmp / "ab"), str(rounds)],
                          capture_output=True, text=True, timeout=900, cwd=REPO,
                          env=cpu_env(VLLM_ENABLE_V1_MULTIPROCESSING="0"))  # the installed wheel, patches/ in it
    line = [x for x in proc.stdout.splitlines() if x.startswith("AB ")]
    assert proc.returncode == 0 and line, proc.stderr[-3000:]
    return json.loads(line[-1][3:])


def hooked_worker_classes() -> tuple[type, type]:
    """A worker with an ``execute_model`` that does nothing, bare and with rlprof's worker hook."""
    import wrapt

    from rlprof_plugins.patches.vllm.worker_hooks import _execute_model

    class Worker:
        def execute_model(self, scheduler_output):
            return scheduler_output

    class Wrapped(Worker):
        pass

    wrapt.wrap_function_wrapper(Wrapped, "execute_model", _execute_model)
    return Worker, Wrapped


def decode_output() -> SimpleNamespace:
    """A scheduler output of 8 decoding requests, as the worker hook reads one."""
    return SimpleNamespace(num_scheduled_tokens={f"r{k}": 1 for k in range(8)}, total_num_scheduled_tokens=8,
                           scheduled_new_reqs=[])


def worker_with(wrapped_class: type, recorder) -> object:
    """A hooked worker whose step metrics are ``recorder`` (False: off, as the hook caches it)."""
    from rlprof_plugins.patches.vllm.worker_hooks import RECORDER_ATTR

    worker = wrapped_class()
    worker.__dict__[RECORDER_ATTR] = recorder
    return worker


def hook_cost() -> dict:
    """ns per call: the wrapped execute_model with no session vs the bare method."""
    Worker, Wrapped = hooked_worker_classes()
    bare, wrapped, n = Worker(), Wrapped(), 200_000
    t_bare = min(timeit.repeat(lambda: bare.execute_model(1), number=n, repeat=5)) / n
    t_wrapped = min(timeit.repeat(lambda: wrapped.execute_model(1), number=n, repeat=5)) / n
    return {"bare_ns": t_bare * 1e9, "wrapped_idle_ns": t_wrapped * 1e9, "overhead_ns": (t_wrapped - t_bare) * 1e9}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results-vllm-profiling.json")
    args = parser.parse_args()
    results: dict = {"hook": hook_cost()}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        results["idle_ab"] = idle_hook_ab(tmp)
        for with_stack, key in ((True, "stack"), (False, "nostack")):
            results[key] = {label: measure(tmp, label, with_stack) for label in ("native", "plugin")}
    args.out.write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))
    print(render_markdown(results))
    return 0


def render_markdown(r: dict) -> str:
    med = statistics.median

    def col(key, label, f):
        return f(r[key][label])

    rows = []
    for key, title in (("stack", "stacks on"), ("nostack", "stacks off")):
        stop = {lb: med(r[key][lb]["stop_s"]) for lb in ("native", "plugin")}
        nowait = med(r[key]["plugin"]["stop_nowait_s"])
        size = {lb: med(r[key][lb]["trace_bytes"]) / 1e6 for lb in ("native", "plugin")}
        gap = {lb: med(x["max_gap_s"] for x in r[key][lb]["during_stop"]) for lb in ("native", "plugin")}
        idle_gap = {lb: med(x["max_gap_s"] for x in r[key][lb]["idle"]) for lb in ("native", "plugin")}
        lat = {lb: med(x["latency_s"] for x in r[key][lb]["during_stop"]) for lb in ("native", "plugin")}
        idle_lat = {lb: med(x["latency_s"] for x in r[key][lb]["idle"]) for lb in ("native", "plugin")}
        rows += [
            (f"`/stop_profile` answer, files on disk when it returns, {title}", f"{stop['native']:.2f} s",
             f"{stop['plugin']:.2f} s", f"native / rlprof = {stop['native'] / stop['plugin']:.1f}x"),
            (f"`/stop_profile` answer with `{{\"wait\": false}}` (files written after), {title}", "-",
             f"{nowait:.3f} s", ""),
            (f"worker trace (gz), {title}", f"{size['native']:.2f} MB", f"{size['plugin']:.2f} MB", ""),
            (f"largest gap between streamed tokens while stopping + exporting, {title}",
             f"{gap['native'] * 1e3:.0f} ms", f"{gap['plugin'] * 1e3:.0f} ms",
             f"vs no profiling ({idle_gap['native'] * 1e3:.0f} / {idle_gap['plugin'] * 1e3:.0f} ms): "
             f"native {gap['native'] / idle_gap['native']:.0f}x, rlprof {gap['plugin'] / idle_gap['plugin']:.0f}x"),
            (f"128-token completion latency while stopping + exporting, {title}",
             f"{lat['native']:.2f} s", f"{lat['plugin']:.2f} s",
             f"vs no profiling ({idle_lat['native']:.2f} / {idle_lat['plugin']:.2f} s): "
             f"native {lat['native'] / idle_lat['native']:.1f}x, rlprof {lat['plugin'] / idle_lat['plugin']:.1f}x"),
        ]
    ab = r["idle_ab"]
    rows += [
        ("tokens/s, no session: one in-process engine, 5 rounds each, alternating hook reverted / applied",
         f"{ab['no_hook']:.0f} (hook reverted)", f"{ab['hook']:.0f} (hook applied, idle)",
         f"rlprof / without = {ab['hook'] / ab['no_hook']:.3f}"),
        ("worker hook per iteration, no session", f"{r['hook']['bare_ns']:.0f} ns (bare call)",
         f"{r['hook']['wrapped_idle_ns']:.0f} ns", f"+{r['hook']['overhead_ns']:.0f} ns per iteration"),
    ]
    lines = ["| measure | native vLLM (`RLPROF_DISABLE=1`) | with rlprof | ratio |", "| --- | --- | --- | --- |"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
