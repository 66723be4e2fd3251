"""No false alarms: ten minutes of steady traffic on each engine with the flight recorder's defaults, no dump.

One fresh server per engine (vLLM 0.32, SGLang 0.5.23, TP=1, ``torch_profiler_dir`` and nothing else: the
recorder's defaults), ten minutes of steady traffic: each minute one RL step (the trainer marks it, so every
step's numbers are held against the ones before), half of it bursts (3 concurrent 24-token requests, 0.7 s
idle after each) and half continuous traffic (8 concurrent 48-token requests back to back). (Steps of
different traffic are not steady: a minute of continuous traffic after minutes of bursts is five times the
busy time, and it is written as a ``slow_step``, as it should be.) At the
end: not one dump below the directory, every request answered, and the recorder alive (a requested dump
is written, so silence is not a dead recorder). ``make test-extended`` (twenty minutes: beyond CI's 25);
its last run is in docs/performance.md, "Flight recorder".
"""

import threading
import time
from pathlib import Path

import pytest

from rlprof_plugins.cli.command import main as rlprof
from rlprof_plugins.metrics.flight_dump import flight_folders, read_anomalies
from tests.helpers import sglang_server
from tests.helpers.flight import mark, wait_anomalies
from tests.helpers.vllm_server import start_server

MINUTES = 10


def steady(server, minutes: int) -> int:
    """``minutes`` of traffic, a step a minute; the requests answered."""
    answered = 0
    lock = threading.Lock()

    def one(tokens: int) -> None:
        nonlocal answered
        server.complete(max_tokens=tokens)
        with lock:
            answered += 1

    def together(n: int, tokens: int) -> None:
        threads = [threading.Thread(target=one, args=(tokens,)) for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    for minute in range(minutes):
        mark(server, 100 + minute)
        started = time.time()
        while time.time() < started + 30:
            together(3, 24)
            time.sleep(0.7)
        while time.time() < started + 60:
            together(8, 48)
    mark(server, 100 + minutes)
    return answered


def soak(server, root: Path) -> None:
    try:
        server.complete(max_tokens=8)
        answered = steady(server, MINUTES)
        assert answered > 100
        dumps = list(flight_folders(root))
        assert dumps == [], [read_anomalies(d.parent.parent) for d in dumps]
        assert rlprof(["dump", "--url", server.url]) == 0  # the recorder is alive: silence was not a dead one
        found, _ = wait_anomalies(root / f"global_step_{100 + MINUTES}", 1)
        assert [a["reason"] for a in found] == ["requested"], found
        print(f"{server.url}: {answered} requests in {MINUTES} minutes, no dump")
    finally:
        server.stop()


@pytest.mark.vllm
@pytest.mark.extended
def test_ten_steady_minutes_on_vllm_write_no_dump(tmp_path):
    root = tmp_path / "traces"
    soak(start_server(tmp_path, {"profiler": "torch", "torch_profiler_dir": str(root)}), root)


@pytest.mark.extended
def test_ten_steady_minutes_on_sglang_write_no_dump(tmp_path):
    if not sglang_server.available():
        pytest.skip("SGLang environment (.venv-sglang) not built: make env")
    root = tmp_path / "traces"
    soak(sglang_server.start_server(tmp_path, {"torch_profiler_dir": str(root)}), root)
