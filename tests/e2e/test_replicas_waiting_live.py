"""Three live replicas, one stretched: the replica-time the fleet lost waiting for it is what the clocks say.

Three SGLang servers (TP=1) each write verl's replica folder (``<save_path>/agent_loop_rollout_replica_<r>``,
as verl's server gives each its ``torch_profiler_dir``). A rollout step is sent to all three at once, every
prompt streamed, replica 1's responses several times longer than the others'. The client's clock says when
each replica's last token arrived; the fleet report's ``replicas_waiting`` for the step (``report/render/fleet.py``:
the sum over replicas of the step's end, its last replica's, minus each replica's own end) must be the sum
the client's clock gives, within 10% or two iterations a replica, and name the replica whose last token came
last by that clock (each replica is named by its server: host and port).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from rlprof_plugins.cli.command import main as rlprof
from tests.helpers import sglang_server
from tests.helpers.rollout_tail import streamed
from tests.helpers.vllm_server import start_together

pytestmark = pytest.mark.extended  # three servers: `make test-extended` (docs/testing.md)

REPLICAS = [f"agent_loop_rollout_replica_{r}" for r in range(3)]
TOKENS = {0: 24, 1: 160, 2: 40}  # each replica's response length: replica 1 stretched
PROMPTS = 3  # each replica's prompts, all sent at once


def test_the_replica_time_lost_waiting_for_a_stretched_replica_is_what_the_clocks_say(tmp_path):
    save_path = tmp_path / "save_path"
    starts = {}
    for r, name in enumerate(REPLICAS):
        folder = tmp_path / f"server-{r}"
        folder.mkdir()
        config = {"torch_profiler_dir": str(save_path / name), "torch_profiler_with_stack": False}
        starts[r] = lambda f=folder, c=config: sglang_server.start_server(f, c)
    servers = start_together(starts)
    ports = {r: server.url.rsplit(":", 1)[1] for r, server in servers.items()}  # each replica is named by its server
    try:
        for server in servers.values():
            assert server.post("/profile_step", {"global_step": 1}).status_code == 200
        ends: dict[int, float] = {}
        lock = threading.Lock()

        def one(r: int) -> None:
            pieces = streamed(servers[r], TOKENS[r])
            assert pieces and pieces[-1][1] == TOKENS[r], pieces[-1:]
            with lock:
                ends[r] = max(ends.get(r, 0.0), pieces[-1][0])  # the replica's last token, the client's clock

        traffic = [threading.Thread(target=one, args=(r,)) for r in servers for _ in range(PROMPTS)]
        for t in traffic:
            t.start()
        for t in traffic:
            t.join()
        time.sleep(0.5)
        for server in servers.values():  # step 1 ends on every replica
            assert server.post("/profile_step", {"global_step": 2}).status_code == 200
        time.sleep(1.0)  # the step logs are written off the engine thread
    finally:
        for server in servers.values():
            server.stop()
    out = tmp_path / "fleet.json"
    assert rlprof(["report", str(save_path), "-q", "--no-cache", "--json", str(out),
                   "-o", str(tmp_path / "fleet.html")]) == 0
    data = json.loads(out.read_text())
    step = next(s for s in data["steps"] if s["global_step"] == 1)
    waiting = step["replicas_waiting"]
    last = max(ends.values())
    lost_by_clock_ms = sum(last - end for end in ends.values()) * 1e3
    iteration_ms = max(r["mean_ms"] or 0.0 for r in step["replicas"])
    print(f"replica-time lost: {waiting['lost_ms']:.0f} ms by the report, {lost_by_clock_ms:.0f} ms by the client's "
          f"clock; ends {waiting['ends_ms']}")
    named = {r: next(n for n in waiting["ends_ms"] if n.endswith(f"-{ports[r]}")) for r in ports}  # host-port
    assert waiting["last"] == named[max(ends, key=ends.get)], (waiting, ends)
    assert abs(waiting["lost_ms"] - lost_by_clock_ms) <= max(0.1 * lost_by_clock_ms, 2 * len(REPLICAS) * iteration_ms), (
        waiting, lost_by_clock_ms, iteration_ms)
    assert lost_by_clock_ms > 0.5 * (last - min(ends.values())) * 1e3  # two replicas waited: the check can fail
