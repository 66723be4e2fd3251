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
- ``rlprof stacks off`` / ``rlprof exact stacks``: the same with ``python_stacks`` set.

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
[--out F]`` (``make bench`` and ``make bench-sglang`` run it). The step: ``tests/helpers/rollout.py``.
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
         "rlprof exact stacks")


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


SLOW_CASES = ("native, engine default",)  # the engine's own exact stacks: each stop takes minutes on CPU


def rounds_of(label: str, rounds: int, slow_rounds: int) -> int:
    return slow_rounds if label in SLOW_CASES else rounds


def vllm_cases(tmp: Path, tp: int, rounds: int, cases: list[str], slow_rounds: int, saved,
               interleave: bool = False) -> dict:
    from tests.helpers.bursty import engine_pid
    from tests.helpers.vllm_server import start_server

    names = ("VLLM::Worker", "VLLM::EngineCore")
    out: dict = {}
    servers = {  # label -> (profiler config, environment, start body)
        "native, stacks off": ({"torch_profiler_with_stack": False}, {"RLPROF_DISABLE": "1"}, {}),
        "native, engine default": ({}, {"RLPROF_DISABLE": "1"}, {}),
        "rlprof default": ({}, {}, {"global_step": 0}),
        "rlprof stacks off": ({}, {}, {"global_step": 0, "python_stacks": "off"}),
        "rlprof exact stacks": ({}, {}, {"global_step": 0, "python_stacks": "exact"}),
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

    bodies = {
        "native, stacks off": {"activities": ["CPU"], "with_stack": False},
        "native, engine default": {"activities": ["CPU"]},
        "rlprof default": {"global_step": 0},
        "rlprof stacks off": {"global_step": 0, "python_stacks": "off"},
        "rlprof exact stacks": {"global_step": 0, "python_stacks": "exact"},
    }
    out: dict = {}
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
    parser.add_argument("--out", type=Path, help="write the runs and the summary as JSON here (after each case)")
    args = parser.parse_args()
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

    with tempfile.TemporaryDirectory() as d:
        measure = vllm_cases if args.engine == "vllm" else sglang_cases
        results = measure(Path(d), args.tp, args.rounds, cases, args.slow_rounds, saved, args.interleave)
    saved(results)
    print(render(args.engine, args.tp, summarise(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
