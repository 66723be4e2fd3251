"""The flight recorder on a live server (tests/e2e/test_vllm_server_tp1.py, test_sglang_server_tp1.py): the
module's servers run it with the defaults from their start, through every other test's traffic and sessions.

- **No false alarm**: after the whole module's traffic (sessions, bursts, streams, conflicts), no dump.
- **A stopped engine is caught**: the engine process is stopped from outside (``SIGSTOP``, as a preempted
  or swapping host would) for 3 s while four streamed requests are all decoding (a stop that landed after one
  had ended is tried again, up to three times); a dump (``slow_iteration`` if the stop fell inside an
  iteration, ``stall`` if between two) lands under the step's ``flight/`` within 5 s of the stop's end, its
  ``duration_ms`` the stop within 10%, its trace read by ``rlprof report``.
- **A slow step is caught**: steps of the same traffic, then one with eight times as many requests: a
  ``slow_step`` dump whose ``duration_ms`` is that step's busy time in the step log.
- **Asked for**: ``rlprof dump --url`` writes the ring now, reason ``requested``.
- **Seen**: ``rlprof report --json`` lists them under ``steps[].anomalies``; ``/metrics`` counts them.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import requests

from rlprof_plugins.cli.command import main as rlprof
from rlprof_plugins.config.options import FLIGHT_DEFAULTS
from rlprof_plugins.metrics.flight_dump import flight_folders
from rlprof_plugins.step_logs.anomalies import read_anomalies
from tests.helpers.bursty import engine_pid

STOP_S = 3.0  # longer than the default stall limit (2 s): a gap this long is a stall


def mark(server, step: int) -> None:
    r = server.post("/profile_step", {"global_step": step})
    assert r.status_code == 200 and r.json()["status"] == "marked", r.text


def wait_anomalies(folder: Path, count: int, timeout: float = 10.0) -> tuple[list[dict], float]:
    """The step folder's dumps once ``count`` are there, and when they were seen."""
    deadline = time.time() + timeout
    while True:
        found = read_anomalies(folder)
        if len(found) >= count or time.time() > deadline:
            return found, time.time()
        time.sleep(0.05)


def step_record(root: Path, step: int, timeout: float = 20.0) -> dict:
    deadline = time.time() + timeout
    while True:
        for path in (root / "steps").glob("*.jsonl"):
            for line in path.read_text().splitlines():
                record = json.loads(line)
                if record["global_step"] == step:
                    return record
        assert time.time() < deadline, f"no step record of step {step}"
        time.sleep(0.2)


class Decoding:
    """``requests`` streamed completions of ``tokens`` tokens each, sent at once; entered once every one has its
    first ``tokens_first`` tokens back (the engine is decoding them all), left once every one has ended."""

    def __init__(self, server, requests: int = 4, tokens: int = 240, tokens_first: int = 8,
                 timeout: float = 120.0) -> None:
        self.server, self.tokens, self.tokens_first, self.timeout = server, tokens, tokens_first, timeout
        self.received = [0] * requests
        self.ended = [False] * requests
        self.failures: list[str] = []
        self._threads = [threading.Thread(target=self._stream, args=(i,), daemon=True) for i in range(requests)]

    def __enter__(self) -> "Decoding":
        for t in self._threads:
            t.start()
        deadline = time.time() + self.timeout
        while min(self.received) < self.tokens_first and not self.failures and time.time() < deadline:
            time.sleep(0.005)
        assert not self.failures and min(self.received) >= self.tokens_first, (self.received, self.failures)
        return self

    def __exit__(self, *exc) -> None:
        for t in self._threads:
            t.join(self.timeout)
        assert not self.failures, self.failures

    def running(self) -> int:
        """How many are decoding now: tokens back, not ended."""
        return sum(1 for n, ended in zip(self.received, self.ended) if n and not ended)

    def _stream(self, i: int) -> None:
        from tests.helpers.streaming import stream_request

        path, body = stream_request("sglang" in type(self.server).__name__.lower(), self.tokens)
        try:
            with requests.post(self.server.url + path, json=body, stream=True, timeout=300,
                               headers=self.server._headers()) as r:
                if r.status_code != 200:
                    raise RuntimeError(f"{r.status_code}: {r.text[:200]}")
                for line in r.iter_lines():
                    if line.startswith(b"data: ") and line != b"data: [DONE]":
                        self.received[i] += 1
        except Exception as e:
            self.failures.append(f"{type(e).__name__}: {e}")
        finally:
            self.ended[i] = True


def explain(server, root: Path, log_from: int) -> dict:
    """What a failed check shows: every dump under the root, and the server log's flight recorder and
    warning lines since the check began."""
    lines = [line for line in server.log()[log_from:].splitlines()
             if "flight recorder" in line or "WARNING" in line or "rlprof" in line]
    return {"dumps": [str(f.relative_to(root)) for f in flight_folders(root)], "log": lines[-40:]}


def check_live(server, names: tuple[str, ...], tmp_path: Path, metrics: bool = True) -> None:
    """``metrics``: the server serves ``/metrics`` (SGLang only with ``--enable-metrics``)."""
    root = Path(server.trace_dir)
    log_from = len(server.log())
    # a dump is written ``after_seconds`` past its event: one the module's last traffic triggered lands meanwhile
    time.sleep(FLIGHT_DEFAULTS["after_seconds"] + 1.5)
    assert list(flight_folders(root)) == [], ("a dump during the module's ordinary traffic (a false alarm)",
                                              explain(server, root, 0))

    # a stopped engine: the stop lands while four streamed requests are all decoding (each has tokens back and none
    # has finished), so it holds every one of them up; a trial where one had finished before the stop landed (a
    # loaded host is slow to send the signal) says nothing and is tried again, on a step of its own
    pid = engine_pid(server, names)
    for trial in range(3):
        stop_step = 40 + trial
        mark(server, stop_step)
        for _ in range(3):
            server.complete(max_tokens=16)
        with Decoding(server, requests=4) as decoding:
            os.kill(pid, signal.SIGSTOP)
            began = time.perf_counter()
            running = decoding.running()
            time.sleep(STOP_S)
            os.kill(pid, signal.SIGCONT)
            stopped_ms = (time.perf_counter() - began) * 1e3
            resumed = time.time()
            found, seen = wait_anomalies(root / f"global_step_{stop_step}", 1)
        print(f"stop {trial}: {running} of 4 requests decoding when stopped; dumps {[a['reason'] for a in found]}")
        if running == 4 or found:
            break
    assert running == 4 or found, ("no trial's stop landed while all four requests were decoding",
                                   explain(server, root, log_from))
    assert len(found) == 1, (found, "a stop that held four decoding requests for 3 s gave no dump",
                             explain(server, root, log_from))
    caught = found[0]
    assert caught["reason"] in ("slow_iteration", "stall") and caught["global_step"] == stop_step, caught
    assert abs(caught["duration_ms"] - stopped_ms) <= 0.1 * stopped_ms, (caught["duration_ms"], stopped_ms)
    assert seen - resumed < 5.0, seen - resumed
    assert caught["baseline_ms"] and caught["factor"] > 1

    # asked for
    assert rlprof(["dump", "--url", server.url]) == 0
    found, _ = wait_anomalies(root / f"global_step_{stop_step}", 2)
    assert sorted(a["reason"] for a in found) == sorted([caught["reason"], "requested"]), found

    # a slow step: steps 51-54 of two requests each, then step 55 of sixteen (eight times the busy time, far above the
    # default factor of 3 however loaded the host)
    for step, requests in ((51, 2), (52, 2), (53, 2), (54, 2), (55, 16)):
        mark(server, step)
        for _ in range(requests):
            server.complete(max_tokens=16)
    mark(server, 56)
    found, _ = wait_anomalies(root / "global_step_55", 1)
    assert [a["reason"] for a in found] == ["slow_step"], found
    busy = step_record(root, 55)["busy_ms"]
    assert abs(found[0]["duration_ms"] - busy) <= 0.1 * busy, (found[0], busy)
    for step in (51, 52, 53, 54):
        assert read_anomalies(root / f"global_step_{step}") == [], step

    # seen where users look
    out = tmp_path / "report.json"
    assert rlprof(["report", str(root), "-q", "--json", str(out), "-o", str(tmp_path / "report.html")]) == 0
    rows = {row["global_step"]: row for row in json.loads(out.read_text())["steps"]}
    reasons = [a["reason"] for a in rows[stop_step]["anomalies"]]
    assert {caught["reason"], "requested"} <= set(reasons), reasons  # (the stop's step itself may read as slow: it held the stop)
    assert all(a["window_iterations"] > 0 for a in rows[stop_step]["anomalies"])  # the report read each window's trace
    assert [a["reason"] for a in rows[55]["anomalies"]] == ["slow_step"]
    if metrics:
        text = server.get("/metrics").text
        counted = [line for line in text.splitlines() if line.startswith("rlprof_anomalies_total{")]
        assert any('reason="slow_step"' in line for line in counted), counted
        assert any('reason="requested"' in line for line in counted), counted
