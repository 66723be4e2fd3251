"""A real vLLM worker killed while it exports its trace: no step waits forever.

The worker process is SIGKILLed while its step's manifest says it is
exporting (stacks on, so torch's stop and the export take seconds). A second
server on the same folder with the same ``server_name`` (the first one
restarted, as far as the folder is concerned: started beside it, idle until
then) gets the next start request: the dead writers of the old step are
marked ``failed`` (process gone), their temporary files are removed, and the
new step completes. (Servers with different names sharing a folder each
write their own: tests/e2e/test_fleet_live.py.)
"""

import json
import os
import signal
import time

import pytest

from rlprof_plugins.trace.analysis.python_stacks import SAMPLE_CAT
from tests.helpers.traces import load_trace, manifest_traces
from tests.helpers.vllm_server import start_server, start_together

# `make test-extended` (CI's 25 minutes: docs/testing.md): in CI, a writer whose process is gone is marked failed
# and its temporaries removed on a real killed child process by tests/unit/test_reaping.py
pytestmark = [pytest.mark.vllm, pytest.mark.extended]


def manifest_of(folder):
    try:
        return json.loads((folder / "manifest.json").read_text())
    except (OSError, ValueError):
        return None


def test_worker_killed_mid_export_leaves_a_failed_step_not_a_stuck_one(tmp_path):
    traces = tmp_path / "traces"
    config = {"profiler": "torch", "torch_profiler_dir": str(traces), "torch_profiler_with_stack": True,
              "ignore_frontend": True, "server_name": "rollout-0"}
    (tmp_path / "again").mkdir()
    # the server that finds the dead writer's step starts beside the first (the same trace folder),
    # idle until then: two starts take about the time of one
    started = start_together({"first": lambda: start_server(tmp_path, config),
                              "again": lambda: start_server(tmp_path / "again", config)})
    first, again = started["first"], started["again"]
    step = traces / "global_step_1"
    try:
        assert first.post("/start_profile", {"global_step": 1}).status_code == 200
        for _ in range(4):
            first.complete(max_tokens=32)
        assert first.post("/stop_profile", {"wait": False}).status_code == 200
        deadline = time.time() + 60
        while time.time() < deadline:
            rank0 = ((manifest_of(step) or {}).get("writers") or {}).get("rank0") or {}
            if rank0.get("state") == "exporting":
                break
            time.sleep(0.01)
        assert rank0.get("state") == "exporting", manifest_of(step)
        os.kill(rank0["process"]["pid"], signal.SIGKILL)  # mid-export: torch's stop or the writing
        first.stop()
        assert manifest_of(step)["state"] == "exporting"  # what a dead writer leaves behind

        # the other server, on the same trace folder
        assert again.post("/start_profile", {"global_step": 2, "step_end": 3}).status_code == 200
        old = manifest_of(step)
        assert old["state"] == "failed", old
        assert "process gone" in old["writers"]["rank0"]["error"], old["writers"]["rank0"]
        assert not list(step.glob(".*.tmp"))  # its unfinished temporaries are gone
        again.complete(max_tokens=8)
        assert again.wait_state()["state"] == "done"
        rank0 = manifest_traces(traces / "global_step_2")
        assert list(rank0) == ["rank0"]
        # torch_profiler_with_stack written true: torch's exact stacks, as vLLM records them, no sampler
        events = load_trace(rank0["rank0"])["traceEvents"]
        assert any(e.get("cat") == "python_function" for e in events)
        assert not any(e.get("cat") == SAMPLE_CAT for e in events)
    finally:
        first.stop()
        again.stop()
