"""Demo: profile two RL global steps of a real vLLM or SGLang server with rlprof.

``python examples/demo.py [vllm|sglang]``. Starts vLLM 0.32 or SGLang 0.5.23
(CPU) serving the tiny test model with the plugin and
``--profiler-config '{"profiler":"torch", ..., "step_start":2, "step_end":6}'``,
then runs RL global steps 35-37 as a trainer would, with the trainer-side
client (``RolloutProfiler(steps=[36, 37])``, docs/trainer.md): each step a
rollout batch inside ``profiler.step(global_step)``, which starts a profile
for steps 36 and 37 only (step 37 with ``"by_stage": true`` and the window
overridden to ``[0, 6)``: prefill and decode apart), stops it and waits until
the traces are written. Prints the
files written, the step report (``rlprof report``: one offline page, step 37
against 36), the engine iterations each trace holds, each step's manifest,
and how to open the traces. Run with ``make demo`` / ``make demo-sglang``:
the same JSON configuration and the same requests on both engines.

It uses the same server launcher as the end-to-end tests, so it runs exactly
what the tests check.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))  # after site-packages: rlprof_plugins is the installed wheel, tests/ comes from here

from tests.helpers import sglang_server, vllm_server  # noqa: E402
from rlprof_plugins.client import RolloutProfiler  # noqa: E402
from rlprof_plugins.client.commands import render  # noqa: E402
from rlprof_plugins.cli.command import main as rlprof  # noqa: E402
from tests.helpers.traces import iteration_details, iteration_indices, load_trace  # noqa: E402

ENGINES = {"vllm": ("vLLM", vllm_server.start_server), "sglang": ("SGLang", sglang_server.start_server)}

OUT = REPO / "demo-traces"
PROMPTS = ["the rollout engine", "reward policy value", "tensor parallel ranks", "global step trace"]


def rollout(server, step: int) -> None:
    """One rollout batch: concurrent requests, as a trainer's workers send them."""
    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        list(pool.map(lambda p: server.complete(f"{p} {step}", max_tokens=12), PROMPTS))


def tree(root: Path) -> None:
    print(f"{root}/")
    for path in sorted(root.rglob("*")):
        if any(part.startswith(".") for part in path.relative_to(root).parts):
            continue  # the manifest's lock file, the report's cache
        depth = len(path.relative_to(root).parts)
        label = path.name + ("/" if path.is_dir() else f"  ({path.stat().st_size / 1024:.1f} KiB)")
        print("    " * depth + label)


def main() -> int:
    engine = sys.argv[1] if len(sys.argv) > 1 else "vllm"
    name, start_server = ENGINES[engine]
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir()
    config = {"profiler": "torch", "torch_profiler_dir": str(OUT / "traces"), "torch_profiler_with_stack": False,
              "step_start": 2, "step_end": 6}
    print(f"Starting {name} with rlprof (tiny model, CPU) ... this takes ~30 s")
    t0 = time.time()
    server = start_server(OUT, config)
    print(f"Server ready in {time.time() - t0:.0f} s at {server.url}\n")
    try:
        # The trainer's loop: RL steps 35-37 each run a rollout batch; the client profiles steps 36
        # and 37 only, and step 37 also overrides the window, to catch the prompts (prefill) too.
        profiler = RolloutProfiler([server.url], steps=[36, 37], wait_timeout=120)
        for step in (35, 36, 37):
            overrides = {"by_stage": True, "step_start": 0} if step == 37 else {}
            with profiler.step(step, **overrides) as run:
                rollout(server, step)
            if not run.profiled:
                print(f"global step {step}: rollout only (not a configured step, nothing sent)\n")
                continue
            ranks = run.wait.results[0].body["ranks"]
            print(f"global step {step} {json.dumps(overrides)}: start -> {run.start.results[0].state}, "
                  f"stop -> {run.stop.results[0].body['status']}, "
                  f"{sum(x['iterations_recorded'] for x in ranks)} iterations recorded")
            print(render(run.wait) + "\n")
        bad = server.post("/start_profile", {"global_step": "../../etc"})
        print(f"A bad body is refused: {bad.status_code} {bad.json()}\n")
    finally:
        server.stop()

    # The step report over both steps, step 37 against 36 (docs/report.md): one offline page.
    report = OUT / "traces" / "report.html"
    code = rlprof(["report", str(OUT / "traces"), "--compare", "36", "37", "--json", str(OUT / "report.json"),
                   "--quiet"])
    print("Files written:")
    tree(OUT / "traces")
    print(f"\nThe step report (rlprof report, exit {code}): {report}")
    print("    open it in a browser: steps 36 and 37 side by side, by stage, per rank, operators by change")
    print("\nEngine iterations in each worker trace (step 36: window [2, 6); step 37: [0, 6) by stage):")
    for trace in sorted(p for p in (OUT / "traces").rglob("*.pt.trace.json.gz") if ".async_llm." not in p.name):
        data = load_trace(trace)
        stages = iteration_details(data)
        shown = ", ".join(f"{i} {d[0]} (prompt {d[1]}, gen {d[2]}, batch {d[3]})" for i, d in sorted(stages.items()))
        print(f"  {trace.relative_to(OUT)}:\n      {shown or iteration_indices(data)}")
    for step in (36, 37):
        m = json.loads((OUT / "traces" / f"global_step_{step}" / "manifest.json").read_text())
        print(f"\nglobal_step_{step}/manifest.json: state={m['state']}, {name} {m['engine_version']}, "
              f"{len(m['files'])} files: " + ", ".join(f"{f['rank']}/{f['stage']}" for f in m["files"]))
    print("\nOpen a trace: go to https://ui.perfetto.dev, 'Open trace file', pick a .pt.trace.json.gz;")
    print("each recorded engine iteration is a range named 'rlprof::iteration N'.")
    print(f"Server log: {server.log_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
