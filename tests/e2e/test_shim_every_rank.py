"""The torch shim for every rank of a host: a TP=2 vLLM server that finds no shim built.

A user who never ran ``rlprof build-shim`` starts a server whose two ranks ask
for the shim at their first session together: one builds it in the background
(the build lock), the other loses the lock or asks while the build runs. Both
keep torch's own stop for that session; once the shim is built and proven,
each looks again and the next session's stop leaves the engine thread on both
ranks (the status's ``stop_off_engine_thread``, and each rank's section of the
manifest), its traces whole. Each process that recorded says once why its stop stayed
on the engine thread.

In ``make test-extended`` (a TP=2 server of its own and a shim build: CI's
time); in CI the same path runs in-process in
``tests/unit/test_detached_stop.py`` (a process that lost the build picks up
the shim another built).
"""

from __future__ import annotations

import json
import time

import pytest

from rlprof_plugins.backends import torch_shim
from tests.helpers.traces import iteration_indices, load_trace, rank_traces
from tests.helpers.vllm_server import start_server

pytestmark = pytest.mark.extended


def test_both_ranks_pick_up_the_shim_one_of_them_built(tmp_path):
    import torch

    cache = tmp_path / "empty-cache"
    traces = tmp_path / "traces"
    server = start_server(tmp_path, {"profiler": "torch", "torch_profiler_dir": str(traces)}, tp=2,
                          env={torch_shim.CACHE_ENV: str(cache)}, timeout=360)
    try:
        first = run_session(server, 1)
        assert [r["stop_off_engine_thread"] for r in first["ranks"]] == [False, False], first["ranks"]
        proof = torch_shim.cache_folder(torch_shim.torch_facts(torch)).relative_to(torch_shim.cache_root())
        built = cache / proof / "canary.json"
        deadline = time.monotonic() + 600
        while not (built.is_file() and json.loads(built.read_text()).get("ok")) and time.monotonic() < deadline:
            time.sleep(1)
        assert built.is_file(), f"no shim built below {cache}:\n{server.log()[-3000:]}"
        time.sleep(torch_shim.RECHECK_S + 1)  # each rank looks again this long after it decided "not built"
        second = run_session(server, 2)
        assert [r["stop_off_engine_thread"] for r in second["ranks"]] == [True, True], (second["ranks"],
                                                                                        server.log()[-3000:])
        manifest = json.loads((traces / "global_step_2" / "manifest.json").read_text())
        sections = [w for w in manifest["writers"].values() if w.get("role") == "worker"]
        assert len(sections) == 2 and all(w["stop_off_engine_thread"] for w in sections), sections
        for step in (1, 2):
            found = rank_traces(traces / f"global_step_{step}")
            assert sorted(found) == ["rank0", "rank1"]
            assert all(iteration_indices(load_trace(path)) == [0, 1, 2, 3] for path in found.values()), step
        # one line a process that recorded (the two workers, and the API server's own trace), saying why
        warned = [line.split(")")[0] for line in server.log().splitlines()
                  if "torch's stop runs on the engine thread" in line]
        assert len(warned) == len(set(warned)), warned
        assert {w.split()[0] for w in warned} >= {"(Worker_TP0", "(Worker_TP1"}, warned
    finally:
        server.stop()


def run_session(server, step: int) -> dict:
    """A window of four iterations at ``step``; the status once it is written."""
    r = server.post("/start_profile", {"global_step": step, "step_start": 0, "step_end": 4})
    assert r.status_code == 200, r.text
    server.complete(max_tokens=8)
    status = server.wait_state(timeout=600)
    assert status["state"] == "done" and len(status["ranks"]) == 2, status
    return status
