"""The bursty scenario of ``bench_stop_stall.py``: agent-loop traffic with idle gaps.

Five bursts of 3 concurrent 24-token completions with 0.7 s of idle after each, recorded by one session that a
stop ends in the middle of a sixth burst; one fresh server per recorder (so the engine process's peak resident
memory, ``VmHWM``, is that recorder's).

**Serving time is the bursts' own durations.** A burst is timed from its first request sent to its last answer;
the idle gap after it is not served and counts nowhere (about 3.5 s of every run is ``time.sleep``, against about
1 s of serving). Each server serves the same bursts unrecorded and recorded, ``rounds`` times alternating, so a
ratio compares one server with itself; the per-request latencies are kept beside it.

Reported per recorder: serving time recorded against unrecorded (sum of the bursts, and the median request),
rlprof's own pauses that fell inside a burst (read from the trace: ``rlprof::profiler pause`` events overlapping
the bursts' wall-clock windows), the stop's answer, the time until the files were written, the engine process's
peak and final resident memory, the trace's size.

``measure_stacks`` (``--stacks-modes``) is the breakdown of what a session costs serving, each part switched off
in turn: the plugin absent (``RLPROF_DISABLE=1``) against loaded with no session (rlprof's hooks), stacks off
against unrecorded (torch recording operators, with rlprof's pauses apart), sampled against stacks off (the
sampler), exact against stacks off (torch's Python tracer).
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from pathlib import Path

import requests

from tests.helpers.bursty import CONCURRENT, TOKENS, PeakRss, engine_pid, status_mb  # the e2e tests' traffic
from tests.helpers.traces import written_traces

BURSTS, GAP_S = 5, 0.7  # of the e2e tests' bursts (tests/helpers/bursty.py), more and further apart
ROUNDS = 3  # unrecorded and recorded, alternating on one server


def timed_burst(server) -> tuple[list[threading.Thread], dict]:
    """One burst under way: its threads, and what they fill in as they answer (``latencies``, the wall-clock
    window ``start_ns``/``end_ns`` once ``finish`` is called)."""
    out: dict = {"latencies": [], "start_ns": time.time_ns(), "t0": time.perf_counter()}
    lock = threading.Lock()

    def one() -> None:
        t = time.perf_counter()
        server.complete(max_tokens=TOKENS)
        with lock:
            out["latencies"].append(time.perf_counter() - t)

    threads = [threading.Thread(target=one) for _ in range(CONCURRENT)]
    for t in threads:
        t.start()
    return threads, out


def finish(threads: list[threading.Thread], out: dict) -> dict:
    for t in threads:
        t.join()
    out["seconds"] = time.perf_counter() - out.pop("t0")
    out["end_ns"] = time.time_ns()
    return out


def serve_bursts(server) -> list[dict]:
    """``BURSTS`` bursts, each timed alone, the idle gap after each untimed."""
    bursts = []
    for _ in range(BURSTS):
        bursts.append(finish(*timed_burst(server)))
        time.sleep(GAP_S)
    return bursts


def serving(bursts: list[dict]) -> dict:
    """What a set of bursts says about serving: their summed durations and their requests' latencies."""
    latencies = [x for b in bursts for x in b["latencies"]]
    return {"serving_s": sum(b["seconds"] for b in bursts), "burst_s": [round(b["seconds"], 4) for b in bursts],
            "median_request_s": statistics.median(latencies), "requests": len(latencies)}


def pauses_inside(pauses: list[dict], base_ns: int, bursts: list[dict]) -> float:
    """Seconds of rlprof's pauses that overlap the bursts' windows (a pause while nothing was served costs no
    serving: the idle stop after a burst's last answer)."""
    total = 0.0
    for p in pauses:
        start = base_ns + p["ts"] * 1000
        end = start + p["dur"] * 1000
        for b in bursts:
            total += max(0.0, min(end, b["end_ns"]) - max(start, b["start_ns"])) / 1e9
    return total


def _session(server, engine: str, body: dict, folder: Path) -> dict:
    """One recorded session over ``BURSTS`` bursts, stopped mid-way through one more."""
    before = set(folder.rglob("*")) if folder.exists() else set()
    assert server.post("/start_profile", body).status_code == 200
    bursts = serve_bursts(server)
    out: dict = serving(bursts)
    last = timed_burst(server)
    time.sleep(0.15)  # the stop arrives mid-burst
    t = time.perf_counter()
    # not the helper's post: its 120 s timeout is too short for native stops with stacks
    requests.post(server.url + "/stop_profile", json={}, timeout=1800)
    out["stop_answer_s"] = time.perf_counter() - t
    finish(*last)
    if "global_step" in body:
        server.wait_state(timeout=900)
    files = written_traces(folder, before, poll=1.0)
    out["written_s"] = time.perf_counter() - t
    out["trace_mb"] = sum(p.stat().st_size for p in files) / 2**20
    if "global_step" in body:
        from tests.helpers.traces import load_trace, pause_events

        # the engine's pauses: the rank traces (the API server's own recorder pauses that process only)
        rank_files = [f for f in files if f.parent.name == "ranks" and "async_llm" not in f.name]
        pauses, inside, iterations = [], 0.0, 0
        for f in rank_files:
            trace = load_trace(f)
            mine = pause_events(trace)
            pauses += mine
            inside += pauses_inside(mine, int(trace.get("baseTimeNanoseconds") or 0), bursts)
            iterations += sum(1 for e in trace["traceEvents"] if str(e.get("name", "")).startswith("rlprof::iteration"))
        out["pauses"] = len(pauses)
        out["pauses_in_bursts_s"] = inside
        out["longest_pause_ms"] = max((p["dur"] for p in pauses), default=0) / 1e3
        out["pause_list"] = [(p["args"]["cause"], round(p["dur"] / 1e3), p["args"].get("iterations"))
                             for p in sorted(pauses, key=lambda p: p["ts"])]
        out["iterations"] = iterations
        rank_bytes = sum(f.stat().st_size for f in rank_files)
        out["trace_kb_per_iteration"] = rank_bytes / 1024 / iterations if iterations else None
    return out


def run_one(server, pid: int, engine: str, body: dict | None, folder: Path, rounds: int = ROUNDS) -> dict:
    """``rounds`` of the bursts unrecorded, each followed by the same bursts in a session (``body`` None: no
    session, unrecorded only); the engine process's resident size sampled throughout, so a process killed for
    memory still reports its peak."""
    out: dict = {"unrecorded": [], "recorded": []}
    with PeakRss(pid) as sampled:
        try:
            for _ in range(rounds):
                out["unrecorded"].append(serving(serve_bursts(server)))
                if body is not None:
                    out["recorded"].append(_session(server, engine, body, folder))
        except Exception as e:  # the engine process died (the OOM killer), or its server stopped answering
            out["failed"] = f"{type(e).__name__}: {str(e)[:200]}"
    out["sampled_peak_mb"] = sampled.peak_mb
    out["peak_mb"], out["final_mb"] = status_mb(pid, "VmHWM"), status_mb(pid, "VmRSS")
    return out


def ratios(run: dict) -> dict:
    """A run's serving time recorded against unrecorded, on the same server: the summed bursts of all rounds,
    the median request, and the share of the unrecorded serving that rlprof's pauses inside bursts took."""
    plain, rec = run["unrecorded"], run["recorded"]
    out = {"unrecorded_s": sum(r["serving_s"] for r in plain) / max(len(plain), 1)}
    if not rec or not plain:
        return out
    base = sum(r["serving_s"] for r in plain[:len(rec)])
    out.update(recorded_s=sum(r["serving_s"] for r in rec) / len(rec),
               serving=sum(r["serving_s"] for r in rec) / base,
               per_round=[round(r["serving_s"] / p["serving_s"], 3) for p, r in zip(plain, rec)],
               request=(statistics.median(r["median_request_s"] for r in rec)
                        / statistics.median(p["median_request_s"] for p in plain)),
               pause_share=sum(r.get("pauses_in_bursts_s", 0.0) for r in rec) / base)
    return out


def _server(tmp: Path, engine: str, folder: Path, config_extra: dict | None, env: dict | None = None):
    from tests.helpers import sglang_server, vllm_server

    if engine == "vllm":
        config = {"profiler": "torch", "torch_profiler_dir": str(folder), **(config_extra or {})}
        return vllm_server.start_server(tmp, config, env=env or {})
    return sglang_server.start_server(tmp, None, env=env or {})


RECORDERS = ("none", "native", "rlprof one session", "rlprof default (auto)")


def measure(tmp: Path, engine: str, skip: tuple[str, ...] = ()) -> dict:
    """Every recorder on a fresh server, stacks on and off; ``skip``: rows ``"on | native"`` and the like.
    One round each (the recorders with stacks grow the engine for good)."""
    names = ("VLLM::Worker",) if engine == "vllm" else ("sglang::schedul",)
    results: dict = {}
    for stacks in (True, False):
        for label in RECORDERS:
            key = f"{'on' if stacks else 'off'} | {label}"
            if key in skip:
                continue
            folder = tmp / f"{engine}-{stacks}-{label.replace(' ', '_')}"
            rlprof = label.startswith("rlprof")
            server = _server(tmp, engine, folder, {"torch_profiler_with_stack": stacks},
                             env={} if rlprof or engine == "sglang" else {"RLPROF_DISABLE": "1"})
            if label == "none":
                body = None
            elif label == "native":
                body = {} if engine == "vllm" else {"output_dir": str(folder), "activities": ["CPU"],
                                                    "with_stack": stacks}
            else:
                body = {"global_step": 1, "output_dir": str(folder), "with_stack": stacks} if engine == "sglang" \
                    else {"global_step": 1}
                if label == "rlprof one session":
                    body["chunk_iterations"] = 0
            try:
                server.complete(max_tokens=TOKENS)  # warm-up
                results[key] = run_one(server, engine_pid(server, names), engine, body, folder, rounds=1)
                print(key, json.dumps(ratios(results[key])), flush=True)
            finally:
                server.stop()
    return results


def render(results: dict) -> str:
    lines = ["| stacks | recorder | serving, 5 bursts: recorded vs unrecorded (same server) | median request | "
             "rlprof's pauses in bursts | stop answered | files written | engine peak MB (VmHWM) | trace MB |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for key, r in results.items():
        stacks, label = key.split(" | ")
        if "failed" in r:
            lines.append(f"| {stacks} | {label} | failed: {r['failed']} | | | | | {r['sampled_peak_mb']:.0f} | |")
            continue
        q = ratios(r)
        rec = r["recorded"][0] if r["recorded"] else {}
        if "serving" not in q:
            lines.append(f"| {stacks} | {label} | {q['unrecorded_s']:.2f} s unrecorded | - | - | - | - | "
                         f"{r['peak_mb']:.0f} | - |")
            continue
        pauses = f"{rec['pauses_in_bursts_s'] * 1e3:.0f} ms" if "pauses_in_bursts_s" in rec else "-"
        lines.append(f"| {stacks} | {label} | {q['recorded_s']:.2f} vs {q['unrecorded_s']:.2f} s "
                     f"(**{q['serving']:.2f}x**) | {q['request']:.2f}x | {pauses} | {rec['stop_answer_s']:.1f} s | "
                     f"{rec['written_s']:.1f} s | {r['peak_mb']:.0f} | {rec['trace_mb']:.1f} |")
    return "\n".join(lines)


STACK_MODES = ("plugin off", "none", "off", "exact", "sampled")


def measure_stacks(tmp: Path, engine: str, rounds: int = ROUNDS) -> dict:
    """rlprof's default recorder once per Python-stacks mode (``python_stacks`` in the start request), each on a
    fresh server that also serves the same bursts unrecorded, alternating; ``plugin off`` and ``none`` serve
    only unrecorded (the plugin absent; loaded with no session)."""
    names = ("VLLM::Worker",) if engine == "vllm" else ("sglang::schedul",)
    results: dict = {}
    for mode in STACK_MODES:
        folder = tmp / f"{engine}-stacks-{mode.replace(' ', '_')}"
        server = _server(tmp, engine, folder, None, env={"RLPROF_DISABLE": "1"} if mode == "plugin off" else None)
        body = {"global_step": 1} if engine == "vllm" else {"global_step": 1, "output_dir": str(folder)}
        body = None if mode in ("plugin off", "none") else {**body, "python_stacks": mode}
        try:
            server.complete(max_tokens=TOKENS)  # warm-up
            results[mode] = run_one(server, engine_pid(server, names), engine, body, folder, rounds=rounds)
            print(mode, json.dumps(ratios(results[mode])), flush=True)
        finally:
            server.stop()
    return results


ALTERNATING = ("none", "off", "sampled")


def measure_alternating(tmp: Path, engine: str, rounds: int = 8) -> dict:
    """The serving breakdown on one server: ``rounds`` rounds, each the same bursts unrecorded, recorded with
    stacks off and recorded with sampled stacks, in an order that rotates from round to round. Fresh servers
    differ by a fifth in their unrecorded serving here, more than the sampler costs; on one server each round
    compares like with like. (Exact stacks grow the process for good: they run on a server of their own,
    ``measure_stacks``.)"""
    names = ("VLLM::Worker",) if engine == "vllm" else ("sglang::schedul",)
    folder = tmp / f"{engine}-alternating"
    server = _server(tmp, engine, folder, None)
    base = {"global_step": 1} if engine == "vllm" else {"global_step": 1, "output_dir": str(folder)}
    runs: dict = {mode: [] for mode in ALTERNATING}
    try:
        server.complete(max_tokens=TOKENS)  # warm-up
        pid = engine_pid(server, names)
        with PeakRss(pid) as sampled:
            for r in range(rounds):
                for mode in ALTERNATING[r % 3:] + ALTERNATING[:r % 3]:
                    if mode == "none":
                        runs[mode].append(serving(serve_bursts(server)))
                    else:
                        runs[mode].append(_session(server, engine, {**base, "global_step": 100 * r + len(runs[mode]),
                                                                    "python_stacks": mode}, folder))
                print(engine, "round", r, {m: round(v[-1]["serving_s"], 3) for m, v in runs.items()}, flush=True)
        runs["sampled_peak_mb"] = sampled.peak_mb
    finally:
        server.stop()
    return runs


def alternating_ratios(runs: dict) -> dict:
    """Per round, each mode's serving against the round's unrecorded serving (and sampled against off): the
    median and the mean over the rounds, and each round's."""
    out = {}
    for name, (a, b) in {"off": ("off", "none"), "sampled": ("sampled", "none"),
                         "sampled_vs_off": ("sampled", "off")}.items():
        per = [x["serving_s"] / y["serving_s"] for x, y in zip(runs[a], runs[b])]
        out[name] = {"median": statistics.median(per), "mean": statistics.fmean(per), "rounds": [round(x, 3) for x in per]}
    paused = [x.get("pauses_in_bursts_s", 0.0) / y["serving_s"] for x, y in zip(runs["off"], runs["none"])]
    out["pause_share_off"] = statistics.fmean(paused)
    paused = [x.get("pauses_in_bursts_s", 0.0) / y["serving_s"] for x, y in zip(runs["sampled"], runs["none"])]
    out["pause_share_sampled"] = statistics.fmean(paused)
    return out


def render_alternating(runs: dict, engine: str, hooks: float | None = None) -> str:
    q = alternating_ratios(runs)
    n = len(runs["none"])
    lines = [f"| {engine}, one server, {n} rounds | serving vs unrecorded: median (mean) | each round |",
             "| --- | --- | --- |"]
    for mode, label in (("off", "stacks off"), ("sampled", "sampled stacks"), ("sampled_vs_off", "sampled vs off")):
        r = q[mode]
        lines.append(f"| {label} | **{r['median']:.2f}x** ({r['mean']:.2f}x) | {', '.join(f'{x:.2f}' for x in r['rounds'])} |")
    parts = {"torch recording (stacks off, less its pauses)": q["off"]["mean"] - 1 - q["pause_share_off"],
             "rlprof's pauses in bursts": q["pause_share_off"],
             "the sampler (sampled against off)": q["sampled_vs_off"]["mean"] - 1}
    if hooks is not None:
        parts = {"rlprof's hooks, no session (plugin off vs loaded)": hooks, **parts}
    lines.append("")
    lines.append(f"{engine}, a sampled session's cost by part (share of unrecorded serving, means): "
                 + ", ".join(f"{k} {100 * v:+.1f}%" for k, v in parts.items()))
    return "\n".join(lines)


def breakdown(results: dict) -> dict:
    """What a session costs serving, part by part (each a share of unrecorded serving, + or -):

    - ``hooks``: the plugin loaded with no session against absent (two fresh servers: their noise included);
    - ``torch_recording``: stacks off against unrecorded, less the pauses inside bursts;
    - ``pauses``: rlprof's pauses inside bursts (starting a chunk as a burst begins, a rotation);
    - ``sampler``: sampled against stacks off; ``exact_stacks``: exact against stacks off."""
    q = {mode: ratios(r) for mode, r in results.items() if "failed" not in r}
    out: dict = {}
    if "plugin off" in q and "none" in q:
        out["hooks"] = q["none"]["unrecorded_s"] / q["plugin off"]["unrecorded_s"] - 1
    if "off" in q and "serving" in q["off"]:
        out["pauses"] = q["off"]["pause_share"]
        out["torch_recording"] = q["off"]["serving"] - 1 - q["off"]["pause_share"]
        for mode, name in (("sampled", "sampler"), ("exact", "exact_stacks")):
            if mode in q and "serving" in q[mode]:
                out[name] = q[mode]["serving"] - q["off"]["serving"]
    return out


def render_stacks(results: dict, engine: str) -> str:
    none_mb = results.get("none", {}).get("peak_mb")
    lines = [f"| {engine}: python_stacks | serving, recorded vs unrecorded (per round) | median request | "
             "rlprof's pauses in bursts | engine peak MB (vs unrecorded) | longest pause | trace KB per iteration |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for mode, r in results.items():
        if "failed" in r:
            lines.append(f"| {mode} | failed: {r['failed']} | | | | | |")
            continue
        q = ratios(r)
        memory = f"{r['peak_mb']:.0f}" + (f" ({r['peak_mb'] / none_mb:.2f}x)" if none_mb and r.get("peak_mb") else "")
        if "serving" not in q:
            lines.append(f"| {mode} (unrecorded only) | {q['unrecorded_s']:.3f} s | - | - | {memory} | - | - |")
            continue
        rec = r["recorded"]
        longest = max(x["longest_pause_ms"] for x in rec)
        per = statistics.median(x["trace_kb_per_iteration"] for x in rec if x.get("trace_kb_per_iteration"))
        lines.append(f"| {mode} | **{q['serving']:.2f}x** ({', '.join(f'{x:.2f}' for x in q['per_round'])}) | "
                     f"{q['request']:.2f}x | {100 * q['pause_share']:.1f}% | {memory} | {longest:.0f} ms | {per:.1f} |")
    parts = breakdown(results)
    if parts:
        lines.append("")
        lines.append(f"{engine}, a session's cost by part (share of unrecorded serving): " + ", ".join(
            f"{name.replace('_', ' ')} {100 * v:+.1f}%" for name, v in parts.items()))
    return "\n".join(lines)
