"""Benchmark: the engine's pauses while a long session records and stops.

torch's own ``profiler.stop()`` post-processes everything it recorded on the
thread that recorded (seconds with Python stacks on). Measured in one run, one
server at a time, stacks on and off, for: no profiling; native recording
(vLLM with ``RLPROF_DISABLE=1``; SGLang's own profiler); rlprof with one torch
session (``chunk_iterations: 0``); rlprof's default (``chunk_iterations:
"auto"``, ``max_pause_ms`` the default); and fixed chunk lengths (``--chunks``):

- the largest gap between streamed tokens from the start of recording until
  the stop has returned and the files are written, against the same streams
  with no profiling (the largest no-profiling gap);
- tokens/s while recording, against native recording and against none;
- the profiler's pauses on the engine thread, read from the rank's trace
  (``rlprof::profiler pause`` events): their number, the longest, the total,
  and what the final stop cost per iteration it held against a rotation's.

The session records about ``ITERATIONS`` engine iterations (one stream at a
time, 128 tokens each); the stop is sent half a second into the next stream,
so the final stop holds iterations as a rotation does. The engine is vLLM's
(``make bench`` runs it; ``--engine sglang`` the SGLang server, ``make
bench-sglang``).
``--scenario bursty`` measures agent-loop bursts with idle gaps instead
(``bursty_scenario.py``: each recorder on a fresh server, the engine's peak memory).
``--scenario bursty --stacks-modes``: rlprof's default once per ``python_stacks`` mode (sampled, exact, off)
against the same traffic unrecorded: serving time, the engine's peak memory, the longest pause, the trace's
bytes per iteration (issue 57).
Usage: ``python benchmarks/bench_stop_stall.py [--engine vllm|sglang] [--chunks 32] [--scenario bursty]
[--stacks-modes]``.
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


def pauses_in(files: list[str]) -> list[dict]:
    """The engine thread's pauses in a rank's written traces."""
    from tests.helpers.traces import load_trace, pause_events

    return [p for f in files if ".json" in f for p in pause_events(load_trace(Path(f)))]


def one_session(server, engine: str, body: dict) -> dict:
    """Record ~ITERATIONS iterations of back-to-back streams, then stop half a
    second into the next stream; every gap from the start request to the written files."""
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
        time.sleep(0.5)
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
    rank = (status.get("ranks") or [{}])[0]
    pauses = pauses_in(rank.get("files") or [])
    rotations = [p for p in pauses if p["args"]["cause"] == "rotation"]
    final = [p for p in pauses if p["args"]["cause"] == "stop" and p["args"].get("iterations")]

    def per_iteration(ps: list[dict]) -> float | None:
        n = sum(p["args"]["iterations"] for p in ps)
        return sum(p["dur"] for p in ps) / 1e3 / n if n else None

    return {"max_gap_s": max(gaps), "recording_tokens_per_s": recording_tps, "stop_answer_s": stop_s[0],
            "stops": rank.get("stops"), "pauses": len(pauses),
            "longest_pause_s": max((p["dur"] for p in pauses), default=0) / 1e6 if pauses else None,
            "total_pause_s": sum(p["dur"] for p in pauses) / 1e6 if pauses else None,
            "chunk_lengths": [p["args"].get("iterations") for p in pauses],
            "rotation_ms_per_iteration": per_iteration(rotations), "stop_ms_per_iteration": per_iteration(final),
            "export_s": rank.get("export_seconds")}


def no_profiling(server, engine: str) -> dict:
    gaps, tokens, t0 = [], 0, time.perf_counter()
    while tokens < ITERATIONS:
        _, g, n = stream_once(server, engine)
        gaps += g
        tokens += n
    return {"max_gap_s": max(gaps), "tokens_per_s": tokens / (time.perf_counter() - t0)}


RLPROF_NONE = "none, rlprof loaded"  # vLLM: the rlprof server's own unrecorded streams (SGLang: one server)


def rlprof_bodies(chunks: list[int]) -> dict[str, dict]:
    """rlprof's sessions by label: the default, one torch session, fixed lengths."""
    return {"rlprof default (auto)": {}, "rlprof one session": {"chunk_iterations": 0},
            # torch's stacks off, the engine thread's stack sampled (issue 57); with_stack None: not asked
            "rlprof sampled stacks": {"python_stacks": "sampled", "with_stack": None},
            **{f"rlprof chunks of {n}": {"chunk_iterations": n} for n in chunks}}


def measure_vllm(tmp: Path, with_stack: bool, chunks: list[int], rounds: int) -> dict:
    """Native vLLM (the plugin off) and rlprof: one server each, one at a time."""
    from tests.helpers.vllm_server import start_server

    key = "stack" if with_stack else "nostack"
    out: dict = {}
    step = 0
    for native in (True, False):
        config = {"profiler": "torch", "torch_profiler_dir": str(tmp / f"{native}-{key}"),
                  "torch_profiler_with_stack": with_stack}
        server = start_server(tmp, config, env={"RLPROF_DISABLE": "1"} if native else {})
        try:
            stream_once(server, "vllm")  # warm-up
            if native:
                out["none"] = [no_profiling(server, "vllm") for _ in range(rounds)]
                out["native"] = [one_session(server, "vllm", {}) for _ in range(rounds)]
                continue
            # rlprof's rows compare with this server's own unrecorded streams, not the native server's
            out[RLPROF_NONE] = [no_profiling(server, "vllm") for _ in range(rounds)]
            for label, body in rlprof_bodies(chunks).items():
                runs = []
                for _ in range(rounds):
                    step += 1
                    runs.append(one_session(server, "vllm", {**body, "global_step": step}))
                out[label] = runs
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
        for label, body in rlprof_bodies(chunks).items():
            runs = []
            for _ in range(rounds):
                step += 1
                runs.append(one_session(server, "sglang", {**native, **body, "global_step": step}))
            out[label] = runs
    finally:
        server.stop()
    return out


def render(results: dict) -> str:
    med = statistics.median

    def m(runs: list[dict], key: str) -> float | None:
        values = [x[key] for x in runs if x.get(key) is not None]
        return med(values) if values else None

    lines = ["| stacks | recorder | largest token gap, recording + stop (vs none) | tokens/s recording "
             "(vs native, vs none) | pauses: n, longest, total | final stop vs rotation, ms per iteration |",
             "| --- | --- | --- | --- | --- | --- |"]
    for key, title in (("stack", "on"), ("nostack", "off")):
        r = results[key]
        native_tps = m(r["native"], "recording_tokens_per_s")
        for label in ("none", RLPROF_NONE):
            if label in r:
                lines.append(f"| {title} | {label} | {m(r[label], 'max_gap_s') * 1e3:.0f} ms | "
                             f"{m(r[label], 'tokens_per_s'):.0f} | - | - |")
        for label, runs in r.items():
            if label in ("none", RLPROF_NONE):
                continue
            # each recorder against the unrecorded streams of its own server
            own = r[RLPROF_NONE] if label.startswith("rlprof") and RLPROF_NONE in r else r["none"]
            idle, idle_tps = m(own, "max_gap_s"), m(own, "tokens_per_s")
            gap, tps = m(runs, "max_gap_s"), m(runs, "recording_tokens_per_s")
            pauses = ("-" if m(runs, "longest_pause_s") is None else
                      f"{m(runs, 'pauses'):.0f}, {m(runs, 'longest_pause_s') * 1e3:.0f} ms, "
                      f"{m(runs, 'total_pause_s') * 1e3:.0f} ms")
            stop, rot = m(runs, "stop_ms_per_iteration"), m(runs, "rotation_ms_per_iteration")
            ratio = "-" if stop is None or rot is None else f"{stop:.1f} vs {rot:.1f}"
            lines.append(f"| {title} | {label} | {gap * 1e3:.0f} ms ({gap / idle:.1f}x) "
                         f"| {tps:.0f} ({tps / native_tps:.2f}x, {tps / idle_tps:.2f}x) | {pauses} | {ratio} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", choices=("vllm", "sglang"), default="vllm")
    parser.add_argument("--chunks", default="32", help="fixed chunk lengths to measure beside the default")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--scenario", choices=("streams", "bursty"), default="streams",
                        help="bursty: agent-loop bursts with idle gaps, one fresh server per recorder "
                             "(benchmarks/bursty_scenario.py)")
    parser.add_argument("--skip", default="", help="bursty rows to leave out, comma-separated: 'on | native'")
    parser.add_argument("--stacks-modes", action="store_true",
                        help="bursty: a row per python_stacks mode (sampled, exact, off) against unrecorded")
    parser.add_argument("--alternating", type=int, default=0, metavar="ROUNDS",
                        help="bursty: unrecorded, stacks off and sampled stacks alternating on one server, ROUNDS "
                             "rounds (the serving breakdown)")
    args = parser.parse_args()
    if args.scenario == "bursty" and args.alternating:
        sys.path.insert(0, str(REPO / "benchmarks"))
        import bursty_scenario

        with tempfile.TemporaryDirectory() as d:
            runs = bursty_scenario.measure_alternating(Path(d), args.engine, args.alternating)
        out = args.out or REPO / "benchmarks" / f"results-bursty-alternating-{args.engine}.json"
        out.write_text(json.dumps(runs, indent=2))
        print(bursty_scenario.render_alternating(runs, args.engine))
        return 0
    if args.scenario == "bursty" and args.stacks_modes:
        sys.path.insert(0, str(REPO / "benchmarks"))
        import bursty_scenario

        with tempfile.TemporaryDirectory() as d:
            results = bursty_scenario.measure_stacks(Path(d), args.engine)
        out = args.out or REPO / "benchmarks" / f"results-bursty-stacks-{args.engine}.json"
        out.write_text(json.dumps(results, indent=2))
        print(bursty_scenario.render_stacks(results, args.engine))
        return 0
    if args.scenario == "bursty":
        sys.path.insert(0, str(REPO / "benchmarks"))
        import bursty_scenario

        with tempfile.TemporaryDirectory() as d:
            results = bursty_scenario.measure(Path(d), args.engine,
                                              tuple(x.strip() for x in args.skip.split(",") if x.strip()))
        out = args.out or REPO / "benchmarks" / f"results-bursty-{args.engine}.json"
        out.write_text(json.dumps(results, indent=2))
        print(bursty_scenario.render(results))
        return 0
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
