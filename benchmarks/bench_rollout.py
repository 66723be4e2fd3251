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

Usage: ``python benchmarks/bench_rollout.py --engine vllm|sglang [--tp 1] [--rounds 3] [--cases ...] [--out F]``
(``make bench`` and ``make bench-sglang`` run it). The step: ``tests/helpers/rollout.py``.
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
    pauses = []
    if "global_step" in body:
        from tests.helpers.traces import load_trace, pause_events

        for f in files:
            if f.parent.name == "ranks":
                pauses += pause_events(load_trace(f))
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


SLOW_CASES = ("native, engine default",)  # the engine's own exact stacks: each stop takes minutes on CPU


def rounds_of(label: str, rounds: int, slow_rounds: int) -> int:
    return slow_rounds if label in SLOW_CASES else rounds


def vllm_cases(tmp: Path, tp: int, rounds: int, cases: list[str], slow_rounds: int, saved) -> dict:
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
    try:
        for label in cases:
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


def sglang_cases(tmp: Path, tp: int, rounds: int, cases: list[str], slow_rounds: int, saved) -> dict:
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
    try:
        for label in cases:
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
            out[label] = run_case(server, "sglang", engine_pid(server, ("sglang::schedul",)), label, bodies[label],
                                  server.folder, rounds_of(label, rounds, slow_rounds),
                                  first_step=100 * (len(out) + 1))
            saved(out)
    finally:
        for server in servers.values():
            server.stop()
    return out


def median(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def summarise(results: dict) -> dict:
    """Per case: medians, and generation against the same server's unrecorded steps (paired by round)."""
    out = {}
    for label, runs in results.items():
        plain, rec = runs["unrecorded"], runs["recorded"]
        ratios = [r["generation_s"] / p["generation_s"] for p, r in zip(plain, rec)]
        out[label] = {"unrecorded_s": median(plain, "generation_s"), "recorded_s": median(rec, "generation_s"),
                      "generation_x": statistics.median(ratios) if ratios else None,
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
             "| recorder | generation vs unrecorded | stop answered | trainer's total vs unrecorded generation "
             "| rlprof's engine pauses: n, total, longest | engine peak MB | trace MB |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for label, s in summary.items():
        lines.append(f"| {label} | {f(s['generation_x'], '.2f', 'x')} ({f(s['recorded_s'], '.2f', ' s')} vs "
                     f"{f(s['unrecorded_s'], '.2f', ' s')}) | {f(s['stop_answer_s'], '.2f', ' s')} | "
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
    parser.add_argument("--out", type=Path, help="write the runs and the summary as JSON here (after each case)")
    args = parser.parse_args()
    cases = [c.strip() for c in args.cases.split(";") if c.strip()]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        parser.error(f"--cases: no case {unknown[0]!r}; cases: {'; '.join(CASES)}")
    def saved(results: dict) -> None:
        if args.out:
            args.out.write_text(json.dumps({"engine": args.engine, "tp": args.tp, "rounds": args.rounds,
                                            "slow_rounds": args.slow_rounds,
                                            "plan": [asdict(r) | {"prompt_words": len(r.prompt.split())}
                                                     for r in rollout_plan()],
                                            "summary": summarise(results), "runs": results}, indent=1))

    with tempfile.TemporaryDirectory() as d:
        measure = vllm_cases if args.engine == "vllm" else sglang_cases
        results = measure(Path(d), args.tp, args.rounds, cases, args.slow_rounds, saved)
    saved(results)
    print(render(args.engine, args.tp, summarise(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
