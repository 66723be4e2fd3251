"""The bursty scenario of ``bench_stop_stall.py`` (issue 43): agent-loop traffic with idle gaps.

Five bursts of 3 concurrent 24-token completions, 0.7 s apart, recorded by one
session that a stop ends in the middle of a sixth burst; one fresh server per
recorder (so the engine process's peak resident memory, ``VmHWM``, is that
recorder's), stacks on and off:

- none: the same traffic, nothing recording;
- native: the engine's own profiler (vLLM with ``RLPROF_DISABLE=1``; SGLang's own);
- rlprof one session (``chunk_iterations: 0``) and rlprof's default (``auto``).

Reported: the time the bursts took (the engine's serving while recording),
the stop's answer, the time until the files were written, the engine
process's peak and final resident memory, the trace's size, and for rlprof
the pauses read from the trace (number, longest, and which causes).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import requests

from tests.helpers.bursty import TOKENS, PeakRss, burst, engine_pid, status_mb  # the e2e tests' traffic and readers

BURSTS, GAP_S = 5, 0.7  # of the e2e tests' bursts (tests/helpers/bursty.py), more and further apart


def _written(folder: Path, before: set[Path], timeout: float = 900) -> list[Path]:
    """Trace files that appeared under ``folder`` and stopped growing (SGLang's native stop
    answers before its files exist)."""
    deadline, sizes = time.time() + timeout, None
    while time.time() < deadline:
        files = sorted(p for p in folder.rglob("*.json*") if p not in before and ".rlprof-chunks" not in str(p)
                       and "manifest" not in p.name and "pauses" not in p.name)
        now = [p.stat().st_size for p in files]
        if files and now == sizes:
            return files
        sizes = now
        time.sleep(1.0)
    return []


def run_one(server, pid: int, engine: str, body: dict | None, folder: Path) -> dict:
    """One recorder's session over the bursts (``body`` None: no profiling); the engine process's
    resident size sampled throughout, so a process killed for memory still reports its peak."""
    with PeakRss(pid) as sampled:
        try:
            out = _session(server, pid, engine, body, folder)
        except Exception as e:  # the engine process died (the OOM killer), or its server stopped answering
            out = {"failed": f"{type(e).__name__}: {str(e)[:200]}"}
    out["sampled_peak_mb"] = sampled.peak_mb
    return out


def _session(server, pid: int, engine: str, body: dict | None, folder: Path) -> dict:
    before = set(folder.rglob("*")) if folder.exists() else set()
    t0 = time.perf_counter()
    if body is not None:
        assert server.post("/start_profile", body).status_code == 200
    for _ in range(BURSTS):
        for t in burst(server):
            t.join()
        time.sleep(GAP_S)
    bursts_s = time.perf_counter() - t0
    last = burst(server)
    time.sleep(0.15)  # the stop arrives mid-burst
    out: dict = {"bursts_s": bursts_s}
    if body is not None:
        t = time.perf_counter()
        # not the helper's post: its 120 s timeout is too short for native stops with stacks
        requests.post(server.url + "/stop_profile", json={}, timeout=1800)
        out["stop_answer_s"] = time.perf_counter() - t
    for t in last:
        t.join()
    if body is not None:
        if "global_step" in body:
            server.wait_state(timeout=900)
        files = _written(folder, before)
        out["written_s"] = time.perf_counter() - t0 - bursts_s
        out["trace_mb"] = sum(p.stat().st_size for p in files) / 2**20
        if "global_step" in body:
            from tests.helpers.traces import load_trace, pause_events

            # the engine's pauses: the rank traces (the API server's own recorder pauses that process only)
            pauses = [p for f in files if f.parent.name == "ranks" for p in pause_events(load_trace(f))]
            out["pauses"] = len(pauses)
            out["longest_pause_ms"] = max((p["dur"] for p in pauses), default=0) / 1e3
            out["causes"] = sorted({p["args"]["cause"] for p in pauses})
            out["pause_list"] = [(p["args"]["cause"], round(p["dur"] / 1e3), p["args"].get("iterations"))
                                 for p in sorted(pauses, key=lambda p: p["ts"])]
            rank_files = [f for f in files if f.parent.name == "ranks" and "async_llm" not in f.name]
            iterations = sum(1 for f in rank_files for e in load_trace(f)["traceEvents"]
                             if str(e.get("name", "")).startswith("rlprof::iteration"))
            rank_bytes = sum(f.stat().st_size for f in rank_files)
            out["iterations"] = iterations
            out["trace_kb_per_iteration"] = rank_bytes / 1024 / iterations if iterations else None
    out["peak_mb"], out["final_mb"] = status_mb(pid, "VmHWM"), status_mb(pid, "VmRSS")
    return out


RECORDERS = ("none", "native", "rlprof one session", "rlprof default (auto)")


def measure(tmp: Path, engine: str, skip: tuple[str, ...] = ()) -> dict:
    """Every recorder on a fresh server, stacks on and off; ``skip``: rows ``"on | native"`` and the like."""
    from tests.helpers import sglang_server, vllm_server
    names = ("VLLM::Worker",) if engine == "vllm" else ("sglang::schedul",)
    results: dict = {}
    for stacks in (True, False):
        for label in RECORDERS:
            if f"{'on' if stacks else 'off'} | {label}" in skip:
                continue
            folder = tmp / f"{engine}-{stacks}-{label.replace(' ', '_')}"
            rlprof = label.startswith("rlprof")
            if engine == "vllm":
                config = {"profiler": "torch", "torch_profiler_dir": str(folder), "torch_profiler_with_stack": stacks}
                server = vllm_server.start_server(tmp, config, env={} if rlprof else {"RLPROF_DISABLE": "1"})
                body = {} if label == "native" else None
            else:
                server = sglang_server.start_server(tmp, None)
                body = ({"output_dir": str(folder), "activities": ["CPU"], "with_stack": stacks}
                        if label == "native" else None)
            if rlprof:
                body = {"global_step": 1, "output_dir": str(folder), "with_stack": stacks} if engine == "sglang" \
                    else {"global_step": 1}
                if label == "rlprof one session":
                    body["chunk_iterations"] = 0
            try:
                server.complete(max_tokens=TOKENS)  # warm-up
                results[f"{'on' if stacks else 'off'} | {label}"] = run_one(
                    server, engine_pid(server, names), engine, body, folder)
                print(label, stacks, json.dumps(results[f"{'on' if stacks else 'off'} | {label}"]), flush=True)
            finally:
                server.stop()
    return results


def render(results: dict) -> str:
    lines = ["| stacks | recorder | 5 bursts (vs none) | stop answered | files written | engine peak / final MB "
             "(VmHWM / VmRSS) | trace MB | pauses: n, longest |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for key, r in results.items():
        stacks, label = key.split(" | ")
        none = results.get(f"{stacks} | none", {}).get("bursts_s")
        if "failed" in r:
            lines.append(f"| {stacks} | {label} | failed: {r['failed']} | | | sampled peak "
                         f"{r['sampled_peak_mb']:.0f} | | |")
            continue
        fmt = lambda k, f="{:.1f} s": f.format(r[k]) if k in r else "-"  # noqa: E731
        pauses = f"{r['pauses']}, {r['longest_pause_ms']:.0f} ms" if "pauses" in r else "-"
        ratio = f"{r['bursts_s'] / none:.1f}x" if none else "-"
        memory = (f"{r['peak_mb']:.0f} / {r['final_mb']:.0f}" if r.get("peak_mb") is not None else
                  f"killed for memory after its trace was written (sampled peak {r['sampled_peak_mb']:.0f})")
        lines.append(f"| {stacks} | {label} | {r['bursts_s']:.1f} s ({ratio}) | "
                     f"{fmt('stop_answer_s')} | {fmt('written_s')} | {memory} | "
                     f"{fmt('trace_mb', '{:.1f}')} | {pauses} |")
    return "\n".join(lines)





STACK_MODES = ("none", "off", "exact", "sampled")


def measure_stacks(tmp: Path, engine: str) -> dict:
    """rlprof's default recorder once per Python-stacks mode (``python_stacks`` in the start request), each on
    a fresh server, beside the same traffic unrecorded (issue 57)."""
    from tests.helpers import sglang_server, vllm_server
    names = ("VLLM::Worker",) if engine == "vllm" else ("sglang::schedul",)
    results: dict = {}
    for mode in STACK_MODES:
        folder = tmp / f"{engine}-stacks-{mode}"
        if engine == "vllm":
            server = vllm_server.start_server(tmp, {"profiler": "torch", "torch_profiler_dir": str(folder)})
            body = {"global_step": 1}
        else:
            server = sglang_server.start_server(tmp, None)
            body = {"global_step": 1, "output_dir": str(folder)}
        body = None if mode == "none" else {**body, "python_stacks": mode}
        try:
            server.complete(max_tokens=TOKENS)  # warm-up
            results[mode] = run_one(server, engine_pid(server, names), engine, body, folder)
            print(mode, json.dumps(results[mode]), flush=True)
        finally:
            server.stop()
    return results


def render_stacks(results: dict, engine: str) -> str:
    none = results.get("none", {}).get("bursts_s")
    none_mb = results.get("none", {}).get("peak_mb")
    lines = [f"| {engine}: python_stacks | 5 bursts (vs unrecorded) | engine peak MB (VmHWM, vs unrecorded) | "
             "longest pause | trace KB per iteration (iterations) | stop answered |",
             "| --- | --- | --- | --- | --- | --- |"]
    for mode, r in results.items():
        if "failed" in r:
            lines.append(f"| {mode} | failed: {r['failed']} | | | | |")
            continue
        ratio = f" ({r['bursts_s'] / none:.2f}x)" if none else ""
        memory = f"{r['peak_mb']:.0f}" + (f" ({r['peak_mb'] / none_mb:.2f}x)" if none_mb and r.get("peak_mb") else "")
        pause = f"{r['longest_pause_ms']:.0f} ms" if "longest_pause_ms" in r else "-"
        per = (f"{r['trace_kb_per_iteration']:.1f} ({r['iterations']})" if r.get("trace_kb_per_iteration")
               else "-")
        stop = f"{r['stop_answer_s']:.2f} s" if "stop_answer_s" in r else "-"
        lines.append(f"| {'unrecorded' if mode == 'none' else mode} | {r['bursts_s']:.2f} s{ratio} | {memory} | "
                     f"{pause} | {per} | {stop} |")
    return "\n".join(lines)
