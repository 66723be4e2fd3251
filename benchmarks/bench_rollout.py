"""Benchmark: recording an RL rollout step, against the same step unrecorded and the engine's own profiler.

An RL trainer's rollout sends every prompt of a step at once and waits for the last response: the engine
batches continuously and never waits for work until the step's tail ends. This benchmark plays such steps
(``rollout_plan``): a batch of prompts of varied lengths, several samples of each, responses of varied
lengths with a long tail (a few responses many times longer than the rest), all sent together.

Each case runs on a server of its own kind, rounds alternating with the same server's unrecorded steps:

- ``unrecorded``: the step with no profiling session (every server's own baseline);
- ``native, stacks off`` / ``native, engine default``: the engine's own profiler with rlprof disabled
  (``RLPROF_DISABLE=1``; vLLM with ``torch_profiler_with_stack`` false / the engine's default; SGLang's own
  ``/start_profile`` with ``with_stack`` false / its default, the directory from ``SGLANG_TORCH_PROFILER_DIR``);
- ``rlprof default``: the recipe every guide gives (vLLM ``{"profiler": "torch", "torch_profiler_dir": D}``;
  SGLang ``--profiler-config '{"torch_profiler_dir": D}'``) and a start request naming the global step;
- ``rlprof stacks off`` / ``rlprof exact stacks``: the same with ``python_stacks`` set;
- ``rlprof one torch session``: the same with ``chunk_iterations: 0``: torch stopped once, at the stop request,
  as the engines' own profilers do, instead of when the engine is about to wait (what that choice costs);
- ``rlprof default, first session``: rlprof's default as a fresh server's first recorded step (a new server
  each round, warmed by one unrecorded step): what a fresh install's first session costs.

Every rlprof case takes the path a GPU recording takes: torch's stop and Kineto's writer on the engine thread,
where the engine has no work (``session/chunk_plan.py``); a CPU recording differs only in its activities. The
GPU kit (``make gpu-kit``) runs this benchmark with CUDA activities.

``--alternate``: every case's server is up at once and the cases take turns within each round, so the
machine's drift from round to round falls on all of them alike (the side-by-side figures of docs/performance.md).

``--scenario streams``: async RL's traffic, which never lets the engine wait: ``STREAMS`` clients, each a
process of its own, stream one request after another; a session starts under that traffic, records
``RECORD_S`` seconds and is stopped while the streams go on. Measured per recorder (unrecorded, the engine's
own profiler with stacks off, rlprof's default): the longest time no client received a piece while the stop
runs (from the stop request until the files are written) and over the whole run, and the stop's answer.

Per case, medians over the rounds: generation (the first request sent to the last answer) against the same
server's unrecorded steps; the stop's answer; the trainer's total (start request to files on disk); rlprof's
pauses on the engine thread (read from the rank's trace); the engine process's peak resident memory while
the step was recorded.

With ``--interleave``, rlprof's cases take turns on their server within each round, after one unrecorded step
they share: their ratios to each other (the first case listed is the reference) are then free of the machine's
drift from round to round, which on a shared 2-core machine is larger than the difference between two stacks
modes. Each recorded step also reports the sampler's own time on the engine thread, which the trace's
``rlprof_sampler`` metadata carries (``busy_us``), as a share of generation.

Usage: ``python benchmarks/bench_rollout.py --engine vllm|sglang [--tp 1] [--rounds 3] [--cases ...] [--interleave]
[--alternate] [--scenario rollout|streams] [--out F]`` (``make bench`` and ``make bench-sglang`` run it). The step:
``tests/helpers/rollout.py``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))  # after site-packages: rlprof_plugins is the installed wheel, tests/ comes from here

from tests.helpers.rollout import (PROMPTS, SAMPLES, SGLANG_FLAGS, VLLM_FLAGS, Request,  # noqa: E402
                                   rollout, rollout_plan)
from tests.helpers.traces import written_traces  # noqa: E402
from rlprof_plugins.trace.format.sampler_account import SAMPLER_KEY  # noqa: E402

CASES = ("native, stacks off", "native, engine default", "rlprof default", "rlprof stacks off",
         "rlprof exact stacks", "rlprof one torch session", "rlprof default, first session")
FIRST_SESSION = "rlprof default, first session"  # a fresh server per round


def recorded_step(server, engine: str, pid: int, body: dict, folder: Path, plan: list[Request]) -> dict:
    """One step recorded as a trainer records it: start, the rollout, stop, files on disk."""
    from tests.helpers.bursty import PeakRss

    folder.mkdir(parents=True, exist_ok=True)
    before = set(folder.rglob("*"))
    out: dict = {}
    with PeakRss(pid) as peak:
        t0 = time.perf_counter()
        r = requests.post(server.url + "/start_profile", json=body, timeout=600)
        assert r.status_code == 200, r.text[:300]
        out["generation_s"] = rollout(server, engine, plan)
        t = time.perf_counter()
        r = requests.post(server.url + "/stop_profile", json={}, timeout=1800)
        out["stop_answer_s"] = time.perf_counter() - t
        if "global_step" in body:
            status = server.wait_state(timeout=900)
            out["state"] = status["state"]
        files = written_traces(folder, before)
        out["trainer_total_s"] = time.perf_counter() - t0
    out["peak_mb"] = peak.peak_mb
    out["trace_mb"] = sum(p.stat().st_size for p in files) / 2**20
    pauses, traces = [], []
    if "global_step" in body:
        from tests.helpers.traces import load_trace, pause_events

        traces = [load_trace(f) for f in files if f.parent.name == "ranks"]
        for trace in traces:
            pauses += pause_events(trace)
    samplers = [trace.get(SAMPLER_KEY) or {} for trace in traces]
    out["sampler_busy_s"] = max((m.get("busy_us", 0) for m in samplers), default=0) / 1e6 or None
    out["sampler_samples"] = max((m.get("samples", 0) for m in samplers), default=0) or None
    out["pauses"] = len(pauses)
    out["pause_causes"] = sorted({p["args"]["cause"] for p in pauses})
    out["pause_list"] = [{"cause": p["args"]["cause"], "iterations": p["args"].get("iterations"),
                          "ms": round(p["dur"] / 1e3, 1)} for p in pauses]
    out["engine_pause_s"] = sum(p["dur"] for p in pauses) / 1e6
    out["longest_pause_ms"] = max((p["dur"] for p in pauses), default=0) / 1e3
    return out


def run_case(server, engine: str, pid: int, label: str, body: dict | None, folder: Path, rounds: int,
             first_step: int) -> dict:
    """``rounds`` of an unrecorded step followed by the same step recorded (``body`` None: unrecorded only)."""
    plan = rollout_plan()
    runs: dict = {"unrecorded": [], "recorded": []}
    for k in range(rounds):
        runs["unrecorded"].append({"generation_s": rollout(server, engine, plan)})
        if body is not None:
            step_body = dict(body)
            if "global_step" in step_body:
                step_body["global_step"] = first_step + k
            runs["recorded"].append(recorded_step(server, engine, pid, step_body, folder, plan))
        print(f"  {label}: round {k + 1}/{rounds}: unrecorded {runs['unrecorded'][-1]['generation_s']:.2f} s"
              + (f", recorded {runs['recorded'][-1]['generation_s']:.2f} s, stop "
                 f"{runs['recorded'][-1]['stop_answer_s']:.2f} s" if body is not None else ""), flush=True)
    return runs


def run_interleaved(server, engine: str, pid: int, bodies: dict[str, dict], folder: Path, rounds: int) -> dict:
    """``rounds`` of an unrecorded step followed by one recorded step of each case on this one server, the cases'
    order rotated each round: cases compared with each other see the same server at the same moments, so the
    machine's drift from round to round cancels in their ratios (``summarise``'s ``vs_first_x``)."""
    plan = rollout_plan()
    labels = list(bodies)
    out: dict = {label: {"unrecorded": [], "recorded": [], "reference": labels[0]} for label in labels}
    for k in range(rounds):
        plain = {"generation_s": rollout(server, engine, plan)}
        order = labels[k % len(labels):] + labels[:k % len(labels)]
        for label in order:
            body = dict(bodies[label], global_step=1000 + k * len(labels) + labels.index(label))
            out[label]["unrecorded"].append(plain)
            out[label]["recorded"].append(recorded_step(server, engine, pid, body, folder, plan))
        print(f"  round {k + 1}/{rounds}: unrecorded {plain['generation_s']:.2f} s, "
              + ", ".join(f"{label} {out[label]['recorded'][-1]['generation_s']:.2f} s" for label in labels),
              flush=True)
    return out


def launcher(tmp: Path, engine: str, tp: int):
    """``launch(kind, folder)``: a warmed server of ``kind`` (``native``: rlprof disabled, the engine's own profiler
    configured with stacks off; ``rlprof``: the documented recipe) writing into ``folder``."""
    from tests.helpers import sglang_server, vllm_server

    def launch(kind: str, folder: Path):
        env = {"RLPROF_DISABLE": "1"} if kind == "native" else {}
        if engine == "vllm":
            config = {"profiler": "torch", "torch_profiler_dir": str(folder)}
            if kind == "native":
                config["torch_profiler_with_stack"] = False
            server = vllm_server.start_server(tmp, config, tp=tp, env=env, extra=VLLM_FLAGS, timeout=600)
        elif kind == "native":  # SGLang's --sleep-on-idle (the helper's default): an idle server waits for work
            server = sglang_server.start_server(tmp, None, tp=tp, extra=SGLANG_FLAGS, timeout=600,
                                                env={**env, "SGLANG_TORCH_PROFILER_DIR": str(folder)})
        else:  # rather than busy-polling the cores the other servers take turns on
            server = sglang_server.start_server(tmp, {"torch_profiler_dir": str(folder)}, tp=tp, extra=SGLANG_FLAGS,
                                                timeout=600)
        server.engine, server.folder = engine, Path(folder)
        rollout(server, engine, rollout_plan(1))  # warm-up
        return server

    return launch


# per case: (the server it runs on, its start body); ``None`` as the server: a fresh one every round
ALTERNATING = {"native, stacks off": ("native", None), "rlprof default": ("rlprof", {"global_step": 0}),
               "rlprof stacks off": ("rlprof", {"global_step": 0, "python_stacks": "off"}),
               "rlprof one torch session": ("rlprof", {"global_step": 0, "chunk_iterations": 0}),
               FIRST_SESSION: (None, {"global_step": 0})}


def alternating_cases(tmp: Path, engine: str, tp: int, rounds: int, cases: list[str], saved) -> dict:
    """Every case's server up at once, the cases taking turns within each round (their order rotated each
    round), each round of a case its server's unrecorded step then the recorded one: the machine's drift from
    round to round falls on every case alike. ``FIRST_SESSION`` starts a server of its own each round and
    records its first session."""
    from tests.helpers.bursty import engine_pid

    names = ("VLLM::Worker", "VLLM::EngineCore") if engine == "vllm" else ("sglang::schedul",)
    native = {} if engine == "vllm" else {"activities": ["CPU"], "with_stack": False}
    launch = launcher(tmp, engine, tp)
    plan = rollout_plan()
    servers = {kind: launch(kind, tmp / f"{engine}-{kind}") for kind in {ALTERNATING[c][0] for c in cases} if kind}
    out: dict = {label: {"unrecorded": [], "recorded": []} for label in cases}
    try:
        for k in range(rounds):
            for label in cases[k % len(cases):] + cases[:k % len(cases)]:
                kind, body = ALTERNATING[label]
                server = servers[kind] if kind else launch("rlprof", tmp / f"{engine}-first-{k}")
                try:
                    body = native if body is None else dict(body, global_step=1000 + k * len(cases) + cases.index(label))
                    out[label]["unrecorded"].append({"generation_s": rollout(server, engine, plan)})
                    out[label]["recorded"].append(recorded_step(server, engine, engine_pid(server, names), body,
                                                                server.folder, plan))
                finally:
                    if not kind:
                        server.stop()
                r = out[label]["recorded"][-1]
                print(f"  round {k + 1}/{rounds}, {label}: unrecorded {out[label]['unrecorded'][-1]['generation_s']:.2f} s, "
                      f"recorded {r['generation_s']:.2f} s, stop {r['stop_answer_s']:.2f} s", flush=True)
            saved(out)
    finally:
        for server in servers.values():
            server.stop()
    return out


SLOW_CASES = ("native, engine default",)  # the engine's own exact stacks: each stop takes minutes on CPU


def rounds_of(label: str, rounds: int, slow_rounds: int) -> int:
    return slow_rounds if label in SLOW_CASES else rounds


def vllm_cases(tmp: Path, tp: int, rounds: int, cases: list[str], slow_rounds: int, saved,
               interleave: bool = False) -> dict:
    from tests.helpers.bursty import engine_pid
    from tests.helpers.vllm_server import start_server

    names = ("VLLM::Worker", "VLLM::EngineCore")
    out: dict = {}
    if FIRST_SESSION in cases:
        cases = [c for c in cases if c != FIRST_SESSION]
        out.update(alternating_cases(tmp, "vllm", tp, rounds, [FIRST_SESSION], saved))
    servers = {  # label -> (profiler config, environment, start body)
        "native, stacks off": ({"torch_profiler_with_stack": False}, {"RLPROF_DISABLE": "1"}, {}),
        "native, engine default": ({}, {"RLPROF_DISABLE": "1"}, {}),
        "rlprof default": ({}, {}, {"global_step": 0}),
        "rlprof stacks off": ({}, {}, {"global_step": 0, "python_stacks": "off"}),
        "rlprof exact stacks": ({}, {}, {"global_step": 0, "python_stacks": "exact"}),
        "rlprof one torch session": ({}, {}, {"global_step": 0, "chunk_iterations": 0}),
    }
    rlprof_server = None
    together = [label for label in cases if label.startswith("rlprof")] if interleave else []
    try:
        for label in cases:
            if label in together[1:]:
                continue  # measured with the first of them
            config, env, body = servers[label]
            folder = tmp / label.replace(" ", "_").replace(",", "")
            if label.startswith("rlprof") and rlprof_server is not None:
                server = rlprof_server  # rlprof's cases share one server, as a trainer's steps do
            else:
                server = start_server(tmp, {"profiler": "torch", "torch_profiler_dir": str(folder), **config},
                                      tp=tp, env=env, extra=VLLM_FLAGS, timeout=600)
                rollout(server, "vllm", rollout_plan(1))  # warm-up
                if label.startswith("rlprof"):
                    rlprof_server = server
            folder = server.trace_dir if label.startswith("rlprof") else folder
            try:
                if label in together:
                    out.update(run_interleaved(server, "vllm", engine_pid(server, names),
                                               {c: servers[c][2] for c in together}, Path(folder), rounds))
                else:
                    out[label] = run_case(server, "vllm", engine_pid(server, names), label, body, Path(folder),
                                          rounds_of(label, rounds, slow_rounds), first_step=100 * (len(out) + 1))
                saved(out)
            finally:
                if server is not rlprof_server:
                    server.stop()
    finally:
        if rlprof_server is not None:
            rlprof_server.stop()
    return out


def sglang_cases(tmp: Path, tp: int, rounds: int, cases: list[str], slow_rounds: int, saved,
                 interleave: bool = False) -> dict:
    """SGLang's own profiler on a server with rlprof disabled (its directory from ``SGLANG_TORCH_PROFILER_DIR``,
    as SGLang's own tests launch it); rlprof's cases on a server launched with ``--profiler-config`` naming the
    directory (the documented recipe), sharing it as a trainer's steps do."""
    from tests.helpers.bursty import engine_pid
    from tests.helpers.sglang_server import start_server

    out: dict = {}
    if FIRST_SESSION in cases:
        cases = [c for c in cases if c != FIRST_SESSION]
        out.update(alternating_cases(tmp, "sglang", tp, rounds, [FIRST_SESSION], saved))
    bodies = {
        "native, stacks off": {"activities": ["CPU"], "with_stack": False},
        "native, engine default": {"activities": ["CPU"]},
        "rlprof default": {"global_step": 0},
        "rlprof stacks off": {"global_step": 0, "python_stacks": "off"},
        "rlprof exact stacks": {"global_step": 0, "python_stacks": "exact"},
        "rlprof one torch session": {"global_step": 0, "chunk_iterations": 0},
    }
    servers: dict = {}
    together = [label for label in cases if label.startswith("rlprof")] if interleave else []
    try:
        for label in cases:
            if label in together[1:]:
                continue  # measured with the first of them
            kind = "rlprof" if label.startswith("rlprof") else "native"
            if kind not in servers:
                for other in list(servers.values()):  # one server at a time on this machine
                    other.stop()
                servers.clear()
                folder = tmp / f"sglang-{kind}"
                if kind == "native":
                    server = start_server(tmp, None, tp=tp, extra=SGLANG_FLAGS, timeout=600, sleep_on_idle=False,
                                          env={"RLPROF_DISABLE": "1", "SGLANG_TORCH_PROFILER_DIR": str(folder)})
                else:
                    server = start_server(tmp, {"torch_profiler_dir": str(folder)}, tp=tp, extra=SGLANG_FLAGS,
                                          timeout=600, sleep_on_idle=False)
                server.folder = folder
                rollout(server, "sglang", rollout_plan(1))  # warm-up
                servers[kind] = server
            server = servers[kind]
            pid = engine_pid(server, ("sglang::schedul",))
            if label in together:
                out.update(run_interleaved(server, "sglang", pid, {c: bodies[c] for c in together}, server.folder,
                                           rounds))
            else:
                out[label] = run_case(server, "sglang", pid, label, bodies[label], server.folder,
                                      rounds_of(label, rounds, slow_rounds), first_step=100 * (len(out) + 1))
            saved(out)
    finally:
        for server in servers.values():
            server.stop()
    return out


STREAMS, STREAM_TOKENS, RECORD_S = 4, 48, 3.0  # the streams scenario: clients, tokens a request, seconds recorded


def stream_without_end(engine: str, url: str, done, results, key: int) -> None:
    """One client (a process of its own): streamed requests back to back until ``done`` is set; puts when each
    piece arrived (``time.perf_counter``, one clock for the machine's processes) on ``results``."""
    from tests.helpers.streaming import pieces, stream_request

    path, body = stream_request(engine == "sglang", STREAM_TOKENS, usage=True)
    arrived: list[float] = []
    try:
        while not done.is_set():
            arrived += [t for t, _ in pieces(url, path, body, {}, engine == "sglang")]
    finally:
        results.put((key, arrived))


def stopped_under_streams(server, body: dict | None) -> dict:
    """``STREAMS`` clients streaming without end; a session (``body``; None: none) started under them, stopped
    ``RECORD_S`` seconds later while they go on. The longest time no client received a piece (every client's
    pieces together: while ``STREAMS`` streams run, a stall of the engine or its frontend shows as such a gap,
    whether a request was mid-answer or just sent) while the stop runs (from the stop request until the files
    are written; unrecorded: a second at the same moment) and over the whole run (ms)."""
    import multiprocessing

    engine = server.engine
    ctx = multiprocessing.get_context("fork")  # this benchmark's own process, no engine in it
    done, results = ctx.Event(), ctx.Queue()
    clients = [ctx.Process(target=stream_without_end, args=(engine, server.url, done, results, k))
               for k in range(STREAMS)]
    for c in clients:
        c.start()
    out: dict = {}
    try:
        time.sleep(2.0)  # every client streaming
        if body is not None:
            r = requests.post(server.url + "/start_profile", json=body, timeout=600)
            assert r.status_code == 200, r.text[:300]
        recording = time.perf_counter()
        time.sleep(RECORD_S)
        began = time.perf_counter()
        if body is None:
            time.sleep(1.0)
            ended = time.perf_counter()
        else:
            r = requests.post(server.url + "/stop_profile", json={}, timeout=1800)
            assert r.status_code == 200, r.text[:300]
            out["stop_answer_s"] = time.perf_counter() - began
            if "global_step" in body:
                server.wait_state(timeout=900)
            ended = time.perf_counter()
            out["stop_done_s"] = ended - began
        time.sleep(0.5)
    finally:
        done.set()
        arrived = sorted(t for _ in clients for t in results.get(timeout=600)[1])
        for c in clients:
            c.join(timeout=60)
    pairs = list(zip(arrived, arrived[1:]))
    during = [b - a for a, b in pairs if b > began and a < ended]
    out["stop_gap_ms"] = max(during, default=ended - began) * 1e3  # no piece at all while it ran: all of it
    out["run_gap_ms"] = max((b - a for a, b in pairs), default=0.0) * 1e3
    out["pieces"] = len(arrived)
    # the streams' pace while the session records (unrecorded: the same seconds of the run)
    out["recording_pieces_per_s"] = sum(recording <= t < began for t in arrived) / (began - recording)
    return out


def streams_cases(tmp: Path, engine: str, tp: int, rounds: int, saved) -> dict:
    """The streams scenario on one engine: the engine's own profiler with stacks off on a server with rlprof
    disabled, then unrecorded and rlprof's default on an rlprof server (the documented recipe)."""
    launch = launcher(tmp, engine, tp)
    native_body = {} if engine == "vllm" else {"activities": ["CPU"], "with_stack": False}
    cases = (("native, stacks off", "native", native_body), ("unrecorded", "rlprof", None),
             ("rlprof default", "rlprof", {"global_step": 0}))
    out: dict = {}
    for kind in ("native", "rlprof"):
        server = launch(kind, tmp / f"streams-{engine}-{kind}")
        try:
            for label, of, body in cases:
                if of != kind:
                    continue
                out[label] = []
                for k in range(rounds):
                    step_body = None if body is None else (dict(body, global_step=700 + k) if "global_step" in body
                                                           else body)
                    out[label].append(stopped_under_streams(server, step_body))
                    print(f"  streams, {label}: round {k + 1}/{rounds}: {out[label][-1]}", flush=True)
                saved(out)
        finally:
            server.stop()
    return out


def summarise_streams(results: dict) -> dict:
    out = {label: {key: median(runs, key) for key in ("stop_gap_ms", "run_gap_ms", "stop_answer_s", "stop_done_s",
                                                      "recording_pieces_per_s")}
           for label, runs in results.items()}
    plain = out.get("unrecorded", {}).get("recording_pieces_per_s")
    for numbers in out.values():
        pace = numbers["recording_pieces_per_s"]
        numbers["pace_while_recording_x"] = pace / plain if pace and plain else None
    return out


def render_streams(engine: str, tp: int, summary: dict) -> str:
    def f(value, spec: str, unit: str = "") -> str:
        return "-" if value is None else f"{value:{spec}}{unit}"

    lines = [f"{engine}, TP={tp}: {STREAMS} clients streaming without end, a session stopped after {RECORD_S:.0f} s "
             "under them, medians", "",
             "| recorder | longest time no client received a piece, while the stop runs | over the whole run "
             "| streams' pace while recording, against unrecorded | stop answered | files written |",
             "| --- | --- | --- | --- | --- | --- |"]
    for label, s in summary.items():
        lines.append(f"| {label} | {f(s['stop_gap_ms'], '.0f', ' ms')} | {f(s['run_gap_ms'], '.0f', ' ms')} | "
                     f"{f(s['pace_while_recording_x'], '.2f', 'x')} | "
                     f"{f(s['stop_answer_s'], '.2f', ' s')} | {f(s['stop_done_s'], '.2f', ' s')} |")
    return "\n".join(lines)


def median(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def summarise(results: dict) -> dict:
    """Per case: medians, and generation against the same server's unrecorded steps (paired by round). Cases
    measured interleaved (each round's unrecorded step shared) also against the first of them, round by round
    (``vs_first_x``), and the sampler's own time as a share of the recorded generation (``sampler_share``)."""
    out = {}
    for label, runs in results.items():
        plain, rec = runs["unrecorded"], runs["recorded"]
        ratios = [r["generation_s"] / p["generation_s"] for p, r in zip(plain, rec)]
        first = results[runs["reference"]]["recorded"] if "reference" in runs else None
        shares = [r["sampler_busy_s"] / r["generation_s"] for r in rec if r.get("sampler_busy_s")]
        out[label] = {"unrecorded_s": median(plain, "generation_s"), "recorded_s": median(rec, "generation_s"),
                      "generation_x": statistics.median(ratios) if ratios else None,
                      "generation_x_per_round": [round(x, 3) for x in ratios],
                      "vs_first_x": (statistics.median(r["generation_s"] / f["generation_s"] for f, r in zip(first, rec))
                                     if first else None),
                      "sampler_share": statistics.median(shares) if shares else None,
                      **{k: median(rec, k) for k in ("stop_answer_s", "trainer_total_s", "engine_pause_s",
                                                      "longest_pause_ms", "pauses", "peak_mb", "trace_mb")},
                      "trainer_x": (median(rec, "trainer_total_s") / median(plain, "generation_s")
                                    if rec else None),
                      "pause_causes": sorted({c for r in rec for c in r.get("pause_causes", [])})}
    return out


def render(engine: str, tp: int, summary: dict) -> str:
    def f(value, spec: str, unit: str = "") -> str:
        return "-" if value is None else f"{value:{spec}}{unit}"

    lines = [f"{engine}, TP={tp}: one rollout step ({PROMPTS} prompts x {SAMPLES} samples, all at once), medians",
             "",
             "| recorder | generation vs unrecorded | vs the first interleaved case | the sampler's own time "
             "| stop answered | trainer's total vs unrecorded generation "
             "| rlprof's engine pauses: n, total, longest | engine peak MB | trace MB |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for label, s in summary.items():
        share = None if s["sampler_share"] is None else 100 * s["sampler_share"]
        lines.append(f"| {label} | {f(s['generation_x'], '.2f', 'x')} ({f(s['recorded_s'], '.2f', ' s')} vs "
                     f"{f(s['unrecorded_s'], '.2f', ' s')}) | {f(s['vs_first_x'], '.3f', 'x')} | "
                     f"{f(share, '.1f', '%')} | {f(s['stop_answer_s'], '.2f', ' s')} | "
                     f"{f(s['trainer_x'], '.1f', 'x')} | {f(s['pauses'], '.0f')}, {f(s['engine_pause_s'], '.3f', ' s')}, "
                     f"{f(s['longest_pause_ms'], '.0f', ' ms')} | {f(s['peak_mb'], '.0f')} | {f(s['trace_mb'], '.1f')} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=("vllm", "sglang"), default="vllm")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", default=";".join(CASES), help=f"separated by ';', of: {'; '.join(CASES)}")
    parser.add_argument("--slow-rounds", type=int, default=1,
                        help=f"rounds of the cases whose stops take minutes ({'; '.join(SLOW_CASES)})")
    parser.add_argument("--interleave", action="store_true",
                        help="rlprof's cases round-robin on their one server, each round's unrecorded step shared: "
                             "their ratios to each other free of the machine's drift between rounds")
    parser.add_argument("--alternate", action="store_true",
                        help=f"every case's server up at once, the cases taking turns each round (of: "
                             f"{'; '.join(ALTERNATING)})")
    parser.add_argument("--scenario", choices=("rollout", "streams"), default="rollout",
                        help="rollout: one RL step, every prompt at once; streams: a stop under traffic without end")
    parser.add_argument("--out", type=Path, help="write the runs and the summary as JSON here (after each case)")
    args = parser.parse_args()
    if args.scenario == "streams":
        def saved_streams(results: dict) -> None:
            if args.out:
                args.out.write_text(json.dumps({"engine": args.engine, "tp": args.tp, "rounds": args.rounds,
                                                "scenario": "streams", "streams": STREAMS, "record_s": RECORD_S,
                                                "summary": summarise_streams(results), "runs": results}, indent=1))

        with tempfile.TemporaryDirectory() as d:
            results = streams_cases(Path(d), args.engine, args.tp, args.rounds, saved_streams)
        saved_streams(results)
        print(render_streams(args.engine, args.tp, summarise_streams(results)))
        return 0
    cases = [c.strip() for c in args.cases.split(";") if c.strip()]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        parser.error(f"--cases: no case {unknown[0]!r}; cases: {'; '.join(CASES)}")
    def saved(results: dict) -> None:
        if args.out:
            args.out.write_text(json.dumps({"engine": args.engine, "tp": args.tp, "rounds": args.rounds,
                                            "interleave": args.interleave,
                                            "slow_rounds": args.slow_rounds,
                                            "plan": [asdict(r) | {"prompt_words": len(r.prompt.split())}
                                                     for r in rollout_plan()],
                                            "summary": summarise(results), "runs": results}, indent=1))

    if args.alternate and any(c not in ALTERNATING for c in cases):
        parser.error(f"--alternate: cases of {'; '.join(ALTERNATING)}")
    with tempfile.TemporaryDirectory() as d:
        if args.alternate:
            results = alternating_cases(Path(d), args.engine, args.tp, args.rounds, cases, saved)
        else:
            measure = vllm_cases if args.engine == "vllm" else sglang_cases
            results = measure(Path(d), args.tp, args.rounds, cases, args.slow_rounds, saved, args.interleave)
    saved(results)
    print(render(args.engine, args.tp, summarise(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
