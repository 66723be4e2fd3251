"""The requests that held a step under traffic that never stops, on a real vLLM server (``metrics/requests.py``).

Async RL and agentic rollouts never leave the frontend idle, so its busy period is cut every
``RLPROF_REQUESTS_PERIOD_S`` (a tenth of a second here) while requests are still running. One long stream runs
beside short requests sent back to back for longer than several bounds; the frontend is never idle while
the stream runs. The stream must be named the longest of the period it ends in, its time end to end between
what the client saw of it (its first streamed piece to its last) and the client's whole wait, and every short request counted once. vLLM's frontend passes no arrival
time of its own at a request's end, so this is the case that lost the longest requests before.

``make test-extended``: a server of its own for one behaviour (CI's 25 minutes: docs/testing.md).
"""

from __future__ import annotations

import threading
import time

import pytest

from rlprof_plugins.step_logs.requests import read_periods
from tests.helpers.streaming import pieces, stream_request
from tests.helpers.vllm_server import start_server

pytestmark = pytest.mark.extended
LONG_TOKENS = 230  # below the tiny model's 256 positions, with the prompt
PERIOD_S = 0.1  # the tiny model streams its tokens within a second on a CPU


def test_a_long_stream_beside_steady_short_traffic_is_kept_across_the_bound(tmp_path):
    root = tmp_path / "traces"
    server = start_server(tmp_path, {"profiler": "torch", "torch_profiler_dir": str(root)},
                          env={"RLPROF_REQUESTS_PERIOD_S": str(PERIOD_S)})
    try:
        server.complete(max_tokens=4)  # warmed: the first request's compile time is no part of the case
        time.sleep(0.5)
        done = threading.Event()
        shorts = []

        def short_traffic() -> None:
            while not done.is_set():
                server.complete(max_tokens=4)
                shorts.append(time.time())

        path, body = stream_request(False, LONG_TOKENS, usage=True)
        sent = time.perf_counter()
        traffic = threading.Thread(target=short_traffic)
        got = []
        stream = threading.Thread(target=lambda: got.extend(pieces(server.url, path, body, server._headers(), False)))
        stream.start()
        time.sleep(0.2)  # the stream arrives first: the frontend is never idle until it ends
        traffic.start()
        stream.join(300)
        waited = time.perf_counter() - sent
        done.set()
        traffic.join(60)
        assert got and got[-1][1] == LONG_TOKENS, got[-1:]
        assert waited > 2 * PERIOD_S, f"the stream ended within {waited:.1f} s: no bound was crossed"
        server.complete(max_tokens=2)  # the next quiet moment: the open period is written
        deadline = time.time() + 30
        while time.time() < deadline:
            periods = read_periods(root)
            if sum(p.requests for p in periods) >= len(shorts) + 3:
                break
            time.sleep(0.2)
    finally:
        server.stop()
    periods = read_periods(root)
    assert len(periods) >= 3, periods  # the warm-up's, at least one cut while the stream ran, the last
    assert sum(p.requests for p in periods) == len(shorts) + 3  # warm-up, stream, last; every short once
    longest = max((r for p in periods for r in p.longest), key=lambda r: r.seconds)
    print(f"stream: {longest.seconds:.2f} s in the log, {got[-1][0] - got[0][0]:.2f} s seen, {waited:.2f} s waited; {len(periods)} periods, "
          f"{len(shorts)} short requests")
    assert longest.output_tokens == LONG_TOKENS
    seen = got[-1][0] - got[0][0]  # the client's first streamed piece to its last
    assert seen - 0.1 <= longest.seconds <= waited + 0.1, (longest, seen, waited)
