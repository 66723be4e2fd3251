"""A long run's worth of profiling on a real server: global steps back to back under steady streaming traffic.

An RL run profiles step after step on one rollout server for hours; what one step leaks, a hundred show. The
soak keeps streaming completions going from two client threads the whole time, and profiles ``steps`` global
steps in a row (start, ``hold_s`` of recording, a stop that answers once the files are on disk). After every
step it reads the resident memory of the server and all its child processes from /proc; at the end, every
step's manifest, the server's health, every request's answer, and the server's log (no crash, no
``EINTR`` surfacing from a wait the sampler's signal interrupted).

Used by ``benchmarks/bench_soak.py`` (100 steps, both engines, sampled and exact stacks: docs/performance.md)
and by the short variants in the e2e tests.
"""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import requests

# what a crash, or a wait that returned EINTR to code that does not retry, leaves in a server's log
CRASHES = re.compile(r"Traceback \(most recent call last\)|Segmentation fault|Fatal Python error|Aborted|"
                     r"terminate called|core dumped|EINTR|Interrupted system call|Signal \d+ ignored")
STREAM_TOKENS = 32


def tree_rss_mb(pid: int) -> float:
    """The resident memory of ``pid`` and every process below it (MB)."""
    total, pending, seen = 0.0, [pid], set()
    while pending:
        p = pending.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            status = Path(f"/proc/{p}/status").read_text()
            total += next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")) / 1024
            for task in Path(f"/proc/{p}/task").iterdir():
                children = task / "children"
                if children.exists():
                    pending += [int(c) for c in children.read_text().split()]
        except (OSError, StopIteration, ValueError):
            continue
    return total


class Streams:
    """Client threads streaming completions back to back until ``stop``; every answer counted, every failure kept."""

    def __init__(self, server, engine: str, threads: int = 2) -> None:
        self.server, self.engine = server, engine
        self.answered, self.failures = 0, []
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def __enter__(self) -> "Streams":
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        for t in self._threads:
            t.join(120)

    def _one(self) -> None:
        from tests.helpers.streaming import stream_request

        path, body = stream_request(self.engine != "vllm", STREAM_TOKENS)
        with requests.post(self.server.url + path, json=body, stream=True, timeout=300) as r:
            if r.status_code != 200:
                raise RuntimeError(f"{r.status_code}: {r.text[:200]}")
            chunks = sum(1 for line in r.iter_lines() if line.startswith(b"data: ") and line != b"data: [DONE]")
        if not chunks:
            raise RuntimeError("a stream with no tokens")

    def _run(self) -> None:
        while not self._done.is_set():
            try:
                self._one()
                with self._lock:
                    self.answered += 1
            except Exception as e:  # kept, not raised: the soak reports every failure at its end
                with self._lock:
                    self.failures.append(f"{type(e).__name__}: {e}"[:300])


def soak(server, engine: str, steps: int, hold_s: float, body: dict, first_step: int = 1000,
         log_from: int = 0) -> dict:
    """``steps`` global steps back to back (``body`` plus each step's number), streams running throughout.
    Returns each step's state and the server tree's resident memory after it, what the streams got, and the
    log's crash lines (read from offset ``log_from``)."""
    pid = server.process.pid
    out: dict = {"engine": engine, "steps": steps, "hold_s": hold_s, "body": body, "states": [], "rss_mb": [],
                 "stop_s": []}
    with Streams(server, engine) as streams:
        time.sleep(1.0)  # the streams are under way before the first step
        for k in range(steps):
            step = first_step + k
            started = server.post("/start_profile", {**body, "global_step": step})
            if started.status_code != 200:
                out["states"].append(f"start {started.status_code}: {started.text[:200]}")
                continue
            time.sleep(hold_s)
            t = time.perf_counter()
            stopped = requests.post(server.url + "/stop_profile", json={}, timeout=600)
            out["stop_s"].append(round(time.perf_counter() - t, 3))
            state = stopped.json().get("state") if stopped.status_code == 200 else f"stop {stopped.status_code}"
            if state != "done":  # SGLang's stop answers at once where its own profiler ran: the status says
                state = server.wait_state(timeout=600).get("state")
            out["states"].append(state)
            out["rss_mb"].append(round(tree_rss_mb(pid), 1))
        out["answered"], out["failures"] = streams.answered, streams.failures[:20]
    out["healthy"] = requests.get(server.url + "/health", timeout=30).status_code == 200
    log = server.log()[log_from:]
    out["crash_lines"] = [line[:300] for line in log.splitlines() if CRASHES.search(line)][:20]
    return out


def check_short(server, engine: str, steps: int = 10) -> dict:
    """The soak's short variant on a server a test module already runs: ``steps`` sampled-stacks steps, each
    recording from its start to its stop (whatever the server's window), checked by ``verdict``."""
    result = soak(server, engine, steps, 0.2, {"python_stacks": "sampled", "step_start": 0, "step_end": None},
                  log_from=len(server.log()))
    print(f"soak {engine}:", summary(result))
    assert not verdict(result), verdict(result)
    return result


def on_fresh_server(engine: str, stacks: str, steps: int, hold_s: float, tmp: Path) -> dict:
    """``soak`` on a server of its own (so its memory is this run's), configured as the guides configure it."""
    from tests.helpers import sglang_server, vllm_server

    folder = tmp / f"{engine}-{stacks}"
    config = {"profiler": "torch", "torch_profiler_dir": str(folder)}
    server = vllm_server.start_server(tmp, config) if engine == "vllm" else sglang_server.start_server(tmp, config)
    try:
        server.complete(max_tokens=8)  # warm-up
        return soak(server, engine, steps, hold_s, {"python_stacks": stacks}, log_from=len(server.log()))
    finally:
        server.stop()


def verdict(result: dict, grown_mb: float = 64.0) -> list[str]:
    """What a soak must show, as the list of what it did not: every step ``done``, the server healthy and every
    request answered, the tree's memory after the last step within ``grown_mb`` of after the tenth (or of the
    first, for a short run), no crash in the log."""
    wrong = []
    bad = [(k, s) for k, s in enumerate(result["states"]) if s != "done"]
    if bad or len(result["states"]) != result["steps"]:
        wrong.append(f"steps not done: {bad[:5]} of {len(result['states'])}")
    if not result["healthy"] or result["failures"] or not result["answered"]:
        wrong.append(f"serving: healthy {result['healthy']}, answered {result['answered']}, "
                     f"failures {result['failures'][:3]}")
    rss = result["rss_mb"]
    base = rss[min(9, len(rss) - 1) if len(rss) >= 20 else 0] if rss else 0.0
    if rss and rss[-1] - base > grown_mb:
        wrong.append(f"memory grew {rss[-1] - base:.0f} MB (from {base:.0f} to {rss[-1]:.0f})")
    if result["crash_lines"]:
        wrong.append(f"crash lines in the log: {result['crash_lines'][:3]}")
    return wrong


def summary(result: dict) -> dict:
    rss = result["rss_mb"]
    at10 = rss[min(9, len(rss) - 1)] if rss else None
    return {"engine": result["engine"], "stacks": result["body"].get("python_stacks"),
            "done": sum(1 for s in result["states"] if s == "done"), "steps": result["steps"],
            "rss_after_step_10_mb": at10, "rss_after_last_mb": rss[-1] if rss else None,
            "grown_mb": round(rss[-1] - at10, 1) if rss else None, "answered": result["answered"],
            "failures": len(result["failures"]), "crash_lines": len(result["crash_lines"]),
            "median_stop_s": sorted(result["stop_s"])[len(result["stop_s"]) // 2] if result["stop_s"] else None}


if __name__ == "__main__":  # a result file, summarised
    import sys

    print(json.dumps(summary(json.loads(Path(sys.argv[1]).read_text())), indent=1))
