"""Benchmark: scheduler memory while a profile is started and no traffic comes, native vs rlprof.

SGLang's scheduler polls for requests in a busy loop while idle. A profiler
running then records every operation of that loop. One SGLang 0.5.23 server
(CPU, tiny model, plugin installed, no rlprof configuration), both paths in
one run:

- native: ``{"output_dir": D, "activities": ["CPU"], "with_stack": false}``
  (no rlprof field: SGLang's own profiler, recording from the request);
- rlprof: ``{"global_step": N, "step_start": 0, "with_stack": false, ...}``
  (rlprof's session: a window from iteration 0 begins with the first engine
  iteration on SGLang, so an idle scheduler is not recorded).

For each, the scheduler's resident memory is sampled for ``IDLE_S`` seconds
after the start, with no request; then one request and a stop. Reported:
growth in MB per idle second, and the ratio. Usage:
``.venv-vllm/bin/python benchmarks/bench_sglang_idle.py`` (~2 min).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))  # after site-packages: rlprof_plugins is the installed wheel, tests/ comes from here

from tests.helpers.sglang_server import start_server  # noqa: E402

IDLE_S = 10


def scheduler(server) -> psutil.Process:
    found = [p for p in psutil.Process(server.process.pid).children(recursive=True)
             if "scheduler" in " ".join(p.cmdline()) or "scheduler" in p.name()]
    if len(found) != 1:
        raise RuntimeError(f"expected one scheduler process, found {found}")
    return found[0]


def idle_growth(server, body: dict) -> float:
    """MB per second the scheduler grows while a profile is started and no request comes."""
    proc = scheduler(server)
    r = server.post("/start_profile", body)
    assert r.status_code == 200, r.text
    before = proc.memory_info().rss
    time.sleep(IDLE_S)
    after = proc.memory_info().rss
    server.complete(max_tokens=4)
    stop = server.post("/stop_profile")
    assert stop.status_code == 200, stop.text
    if "global_step" in body:
        server.wait_state(timeout=300)
    return (after - before) / 1e6 / IDLE_S


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        server = start_server(tmp, None)
        try:
            native = idle_growth(server, {"output_dir": str(tmp / "native"), "activities": ["CPU"],
                                          "with_stack": False})
            ours = idle_growth(server, {"output_dir": str(tmp / "rlprof"), "activities": ["CPU"], "with_stack": False,
                                        "global_step": 1, "step_start": 0})
        finally:
            server.stop()
    print(f"scheduler memory growth while idle with a profile started ({IDLE_S} s, no request):")
    print(f"  native SGLang profiler: {native:8.2f} MB/s")
    print(f"  rlprof session:         {ours:8.2f} MB/s")
    print(f"  native / rlprof:        {native / ours:8.1f}x" if ours > 0 else "  rlprof: no growth")
    return 0


if __name__ == "__main__":
    sys.exit(main())
