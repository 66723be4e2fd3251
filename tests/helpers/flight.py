"""The flight recorder on a live server (tests/e2e/test_vllm_server_tp1.py, test_sglang_server_tp1.py): the
module's servers run it with the defaults from their start, through every other test's traffic and sessions.

- **No false alarm**: after the whole module's traffic (sessions, bursts, streams, conflicts), no dump.
- **A stopped engine is caught**: the engine process is stopped from outside (``SIGSTOP``, as a preempted
  or swapping host would) for 3 s in the middle of steady traffic (a stop that held no request up, the
  traffic having answered before it, is tried again, up to three times); a dump (``slow_iteration`` if the stop
  fell inside an iteration, ``stall`` if between two) lands under the step's ``flight/`` within 5 s of the
  stop's end, its ``duration_ms`` the stop within 10%, its trace read by ``rlprof report``.
- **A slow step is caught**: steps of the same traffic, then one with four times as many requests: a
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

from rlprof_plugins.cli.command import main as rlprof
from rlprof_plugins.metrics.flight_dump import flight_folders, read_anomalies
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


def check_live(server, names: tuple[str, ...], tmp_path: Path, metrics: bool = True) -> None:
    """``metrics``: the server serves ``/metrics`` (SGLang only with ``--enable-metrics``)."""
    root = Path(server.trace_dir)
    assert list(flight_folders(root)) == [], "a dump during the module's ordinary traffic (a false alarm)"

    # a stopped engine: a trial counts once the stop held a request up (it answered after SIGCONT); one whose
    # requests all answered before it (the engine had no work left to hold) is tried again, on a step of its own
    pid = engine_pid(server, names)
    for trial in range(3):
        stop_step = 40 + trial
        mark(server, stop_step)
        for _ in range(3):
            server.complete(max_tokens=16)
        answered: list[float] = []
        traffic = [threading.Thread(target=lambda: (server.complete(max_tokens=200), answered.append(time.time())))
                   for _ in range(4)]
        for t in traffic:
            t.start()
        time.sleep(0.5)  # the engine is decoding
        os.kill(pid, signal.SIGSTOP)
        began = time.perf_counter()
        time.sleep(STOP_S)
        os.kill(pid, signal.SIGCONT)
        stopped_ms = (time.perf_counter() - began) * 1e3
        resumed = time.time()
        found, seen = wait_anomalies(root / f"global_step_{stop_step}", 1)
        for t in traffic:
            t.join()
        held = [a for a in answered if a > resumed]
        print(f"stop {trial}: {len(held)} of 4 requests held up; dumps {[a['reason'] for a in found]}")
        if held or found:
            break
    assert len(found) == 1, (found, "a stop that held requests up for 3 s gave no dump" if held
                             else "no trial's stop held a request up")
    caught = found[0]
    assert caught["reason"] in ("slow_iteration", "stall") and caught["global_step"] == stop_step, caught
    assert abs(caught["duration_ms"] - stopped_ms) <= 0.1 * stopped_ms, (caught["duration_ms"], stopped_ms)
    assert seen - resumed < 5.0, seen - resumed
    assert caught["baseline_ms"] and caught["factor"] > 1

    # asked for
    assert rlprof(["dump", "--url", server.url]) == 0
    found, _ = wait_anomalies(root / f"global_step_{stop_step}", 2)
    assert sorted(a["reason"] for a in found) == sorted([caught["reason"], "requested"]), found

    # a slow step: steps 51-54 of two requests each, then step 55 of eight
    for step, requests in ((51, 2), (52, 2), (53, 2), (54, 2), (55, 8)):
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
