"""API key on the profiling routes, its opt-out, retention and ignore_frontend."""

import json
import time

import pytest
import requests

from rlprof_plugins.store.layout import step_folders
from tests.helpers.traces import rank_traces
from tests.helpers.vllm_server import TINY_MODEL, start_server, start_together

# `make test-extended` (CI's 25 minutes: docs/testing.md): in CI, the API key on the profiling routes is checked on
# vLLM and SGLang in tests/e2e/test_trainer_control.py; retention in tests/unit
pytestmark = pytest.mark.extended

KEY = "sekret-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """A server with a key, and one that opts its profiling routes out of it (started together)."""
    key, optout = tmp_path_factory.mktemp("key"), tmp_path_factory.mktemp("optout")
    base = {"profiler": "torch", "torch_profiler_with_stack": False}
    started = start_together({
        "key": lambda: start_server(key, {**base, "torch_profiler_dir": str(key / "traces")}, extra=["--api-key", KEY]),
        "optout": lambda: start_server(optout, {**base, "torch_profiler_dir": str(optout / "traces"),
                                                "routes_require_api_key": False, "keep_last_steps": 2,
                                                "ignore_frontend": True}, extra=["--api-key", KEY]),
    })
    yield started
    for server in started.values():
        server.stop()


@pytest.fixture(scope="module")
def server_with_key(servers):
    return servers["key"]


@pytest.fixture(scope="module")
def server_opted_out(servers):
    return servers["optout"]


def post(server, path, body=None, headers=None):
    return requests.post(server.url + path, data=json.dumps(body or {}), timeout=60,
                         headers={"content-type": "application/json", **(headers or {})})


def complete(server, headers):
    r = requests.post(server.url + "/v1/completions", timeout=60, headers=headers,
                      json={"model": str(TINY_MODEL), "prompt": "the rollout", "max_tokens": 4})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("path", ["/start_profile", "/stop_profile"])
def test_profiling_routes_need_the_key(server_with_key, path):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
        r = post(server_with_key, path, {"global_step": 1}, headers)
        assert r.status_code == 401 and r.json()["error"]["type"] == "unauthorized"
    assert requests.get(server_with_key.url + "/profile_status", timeout=30).status_code == 401
    assert not (server_with_key.trace_dir / "global_step_1").exists()


def test_with_the_key_profiling_works(server_with_key):
    assert post(server_with_key, "/start_profile", {"global_step": 2, "step_end": 2}, AUTH).status_code == 200
    complete(server_with_key, AUTH)
    r = requests.get(server_with_key.url + "/profile_status?global_step=2", headers=AUTH, timeout=30)
    assert r.status_code == 200
    for _ in range(100):
        state = requests.get(server_with_key.url + "/profile_status", headers=AUTH, timeout=30).json()["state"]
        if state == "done":
            break
        time.sleep(0.2)
    assert state == "done"
    assert rank_traces(server_with_key.trace_dir / "global_step_2")


def test_opt_out_leaves_routes_open_and_v1_guarded(server_opted_out):
    assert post(server_opted_out, "/start_profile", {"global_step": 0, "step_end": 1}).status_code == 200
    complete(server_opted_out, AUTH)
    assert requests.post(server_opted_out.url + "/v1/completions", json={"model": str(TINY_MODEL), "prompt": "x"},
                         timeout=30).status_code == 401
    assert server_opted_out.wait_state()["state"] == "done"


def test_keep_last_steps_and_ignore_frontend(server_opted_out):
    for step in (1, 2, 3, 4):
        assert post(server_opted_out, "/start_profile", {"global_step": step, "step_end": 1}).status_code == 200
        complete(server_opted_out, AUTH)
        assert server_opted_out.wait_state()["state"] == "done"
        # retention decides before done is reported: no status read sees more than two step folders
        steps = [s for s, _ in step_folders(server_opted_out.trace_dir)]
        assert len(steps) <= 2 and steps[-1] == step, steps
    # the folders moved aside are deleted in the background
    deadline = time.time() + 30
    # beside the kept step folders, the step metrics' folder (steps/: every step's numbers, not traces) and
    # the server's hidden claim of the directory (.rlprof-root.json: store.servers)
    while (folders := sorted(p.name for p in server_opted_out.trace_dir.iterdir()
                             if p.name != "steps" and not p.name.startswith("."))) != [
            "global_step_3", "global_step_4"] and time.time() < deadline:
        time.sleep(0.1)
    assert folders == ["global_step_3", "global_step_4"]
    folder = server_opted_out.trace_dir / "global_step_4"
    assert not list(folder.rglob("*async_llm*"))
    m = json.loads((folder / "manifest.json").read_text())
    assert "frontend" not in m["writers"] and m["state"] == "done"
