"""Trainer-side control (issue 8): one call profiles an RL global step on every server.

A fleet of two real local rollout servers -- vLLM 0.32 and SGLang 0.5.23, both
with an API key -- plus a third URL where nothing listens (a server that is
down), in front of them the real vllm-router and sglang-router. The client
(``RolloutProfiler``) and ``rlprof start|stop|status`` drive them for several
global steps; each test checks the step folders the servers wrote, the traces'
recorded engine iterations, and that the down server is reported next to,
not instead of, the others.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from rlprof_plugins.client import DiscoveryError, FleetError, RolloutProfiler
from tests.helpers import sglang_server
from tests.helpers.routers import start_router
from tests.helpers.traces import iteration_indices, load_trace, manifest_traces
from tests.helpers.vllm_server import REPO, free_port, start_server

KEY = "rollout-secret"
ROUTER_KEY = "router-admin-secret"
TOKENS = 8  # one request: 8 engine iterations on either engine


class Fleet:
    def __init__(self, vllm, sglang, down: str) -> None:
        self.vllm, self.sglang, self.down = vllm, sglang, down
        self.live = (vllm, sglang)
        self.urls = [vllm.url, sglang.url, down]

    def rollout(self) -> None:
        """One rollout: a request to each live server, as a trainer's generation phase sends."""
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda s: s.complete(max_tokens=TOKENS), self.live))

    def step_folders(self) -> dict[str, list[str]]:
        return {s.url: sorted(p.name for p in s.trace_dir.glob("global_step_*")) for s in self.live}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    if not sglang_server.available():
        pytest.fail("the SGLang environment is missing: run `make env`")
    tmp = tmp_path_factory.mktemp("fleet")
    def vllm():
        config = {"profiler": "torch", "torch_profiler_dir": str(tmp / "vllm-traces"), "torch_profiler_with_stack": False}
        server = start_server(tmp, config, extra=["--api-key", KEY])
        server.api_key = KEY
        return server

    def sglang():
        config = {"torch_profiler_dir": str(tmp / "sglang-traces"), "torch_profiler_with_stack": False}
        server = sglang_server.start_server(tmp, config, extra=["--api-key", KEY])
        server.api_key = KEY
        return server

    with ThreadPoolExecutor(2) as pool:
        started = [pool.submit(vllm), pool.submit(sglang)]
        try:
            servers = [f.result() for f in started]
        except Exception:
            for f in started:
                if f.exception() is None:
                    f.result().stop()
            raise
    fleet = Fleet(*servers, down=f"http://127.0.0.1:{free_port()}")
    yield fleet
    for s in servers:
        s.stop()


@pytest.fixture(scope="module")
def routers(fleet, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("routers")
    started = {}
    try:
        started["vllm-router"] = start_router("vllm-router", tmp, fleet.urls, expect_workers=3)
        started["sglang-router"] = start_router("sglang-router", tmp, fleet.urls, expect_workers=2)
        started["guarded"] = start_router("sglang-router", tmp, fleet.urls[:2], expect_workers=2,
                                          admin_key=ROUTER_KEY)
        yield started
    finally:
        for router in started.values():
            router.stop()


def rlprof(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlprof_plugins.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=REPO)


def recorded_iterations(server, global_step: int) -> list[int]:
    folder = server.trace_dir / f"global_step_{global_step}"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["state"] == "done" and manifest["global_step"] == global_step, manifest
    traces = manifest_traces(folder)
    assert len(traces) == 1, traces
    return iteration_indices(load_trace(next(iter(traces.values()))))


def table_rows(stdout: str) -> dict[str, str]:
    """The CLI's table: server URL -> its row."""
    return {line.split()[0]: line for line in stdout.splitlines() if line.startswith("http://")}


def test_client_profiles_only_the_configured_steps_on_every_server(fleet, caplog):
    profiler = RolloutProfiler(fleet.urls, api_key=KEY, steps=[1, 3], step_end=4, wait_timeout=120)
    runs = []
    with caplog.at_level(logging.WARNING, logger="rlprof.client"):
        for global_step in range(5):
            with profiler.step(global_step) as run:
                fleet.rollout()
            runs.append(run)

    assert [r.profiled for r in runs] == [False, True, False, True, False]
    assert all(r.start is None for r in runs if not r.profiled)  # nothing sent outside the configured steps
    for run in (runs[1], runs[3]):
        start = {r.url: r for r in run.start.results}
        assert [start[s.url].ok for s in fleet.live] == [True, True], run.start.errors()
        assert {start[s.url].state for s in fleet.live} <= {"waiting", "recording"}
        down = start[fleet.down]
        assert not down.ok and down.http_status == 0 and "unreachable" in down.error
        # stop and wait went to the two servers that started, and both finished
        assert [r.url for r in run.stop.results] == [s.url for s in fleet.live] and run.stop.ok
        assert [r.state for r in run.wait.results] == ["done", "done"] and run.wait.ok
        assert run.directories() == {s.url: str(s.trace_dir / f"global_step_{run.global_step}") for s in fleet.live}
    # One warning per profiled step, naming the down server (the others are not hidden by it)
    failures = [r.getMessage() for r in caplog.records if "start (global step" in r.getMessage()]
    assert len(failures) == 2 and all(fleet.down in m and "1 of 3" in m for m in failures), failures

    assert fleet.step_folders() == {s.url: ["global_step_1", "global_step_3"] for s in fleet.live}
    for server in fleet.live:
        for global_step in (1, 3):
            assert recorded_iterations(server, global_step) == [0, 1, 2, 3], (server.url, global_step)


def test_raise_mode_stops_the_started_servers_and_names_every_failure(fleet):
    profiler = RolloutProfiler(fleet.urls, api_key=KEY, on_error="raise", wait_timeout=120)
    with pytest.raises(FleetError) as raised:
        with profiler.step(11):
            pytest.fail("the rollout must not run when a start failed in raise mode")
    message = str(raised.value)
    assert "start (global step 11) failed on 1 of 3 server(s)" in message and fleet.down in message
    # The two servers that had started were stopped again: nothing keeps recording.
    for server in fleet.live:
        status = server.get("/profile_status?global_step=11").json()
        assert status["state"] in ("exporting", "done"), status
    assert profiler.wait(11, servers=[s.url for s in fleet.live]).ok


def test_wait_gives_up_at_its_timeout_naming_the_state(fleet):
    """A window that never begins (no rollout) keeps the servers waiting; wait says so at the timeout."""
    profiler = RolloutProfiler(fleet.urls[:2], api_key=KEY, step_start=1000, poll_interval=0.2)
    assert profiler.start(12).ok
    waited = profiler.wait(12, timeout=2)
    assert [r.error for r in waited.results] == ["still waiting after 2 s"] * 2
    assert profiler.stop().ok and profiler.wait(12, timeout=60).ok  # a stop ends the waiting sessions


def test_each_server_answers_for_itself_key_and_field_named(fleet):
    keyless = RolloutProfiler(fleet.urls)
    result = keyless.start(20)
    assert not result.ok and len(result.failed) == 3
    by_url = {r.url: r for r in result.results}
    for server in fleet.live:
        assert by_url[server.url].http_status == 401 and "API key" in by_url[server.url].error
    assert by_url[fleet.down].http_status == 0
    errors = "\n".join(result.errors())
    assert all(url in errors for url in fleet.urls)

    bad_window = RolloutProfiler(fleet.urls[:2], api_key=KEY).start(20, step_start=5, step_end=3)
    assert [r.http_status for r in bad_window.results] == [400, 400]
    assert all("step_end" in r.error for r in bad_window.results), bad_window.errors()
    for server in fleet.live:
        assert not (server.trace_dir / "global_step_20").exists()


def test_cli_through_vllm_router_reports_every_server_and_fails_for_the_down_one(fleet, routers):
    router = routers["vllm-router"]
    assert sorted(router.workers()) == sorted(fleet.urls)  # vllm-router keeps listing the down worker

    started = rlprof("start", "--router", router.url, "--global-step", "7", "--step-end", "4", "--api-key", KEY)
    assert started.returncode == 1, started.stderr
    rows = table_rows(started.stdout)
    assert set(rows) == set(fleet.urls)
    for server in fleet.live:
        assert " ok " in rows[server.url] and "global_step_7" in rows[server.url], started.stdout
    assert "FAILED" in rows[fleet.down] and "unreachable" in rows[fleet.down]
    assert "start global step 7: 2 of 3 server(s) ok" in started.stdout

    fleet.rollout()
    waited = rlprof("status", "--router", router.url, "--global-step", "7", "--wait", "--timeout", "120",
                    "--api-key", KEY)
    assert waited.returncode == 1
    rows = table_rows(waited.stdout)
    assert all(" done " in rows[s.url] for s in fleet.live) and "FAILED" in rows[fleet.down], waited.stdout
    for server in fleet.live:
        assert recorded_iterations(server, 7) == [0, 1, 2, 3]

    # Only the live servers: the window closed by itself, a stop says so once; status then exits 0
    live = ",".join(s.url for s in fleet.live)
    stopped = rlprof("stop", "--url", live, "--api-key", KEY, "--json")
    assert stopped.returncode == 0, stopped.stdout
    answers = json.loads(stopped.stdout)["actions"][0]["servers"]
    assert [a["ok"] for a in answers] == [True, True]
    status = rlprof("status", "--url", live, "--global-step", "7", "--api-key", KEY, "--json")
    assert status.returncode == 0 and [a["state"] for a in json.loads(status.stdout)["actions"][0]["servers"]] \
        == ["done", "done"]


def test_cli_through_sglang_router_start_stop_wait(fleet, routers):
    router = routers["sglang-router"]
    assert sorted(router.workers()) == sorted(s.url for s in fleet.live)  # the down worker is not registered

    started = rlprof("start", "--router", router.url, "--global-step", "8", "--api-key", KEY)
    assert started.returncode == 0, started.stdout + started.stderr
    assert set(table_rows(started.stdout)) == {s.url for s in fleet.live}
    fleet.rollout()
    fleet.rollout()
    stopped = rlprof("stop", "--router", router.url, "--wait", "--global-step", "8", "--api-key", KEY)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "stop: 2 of 2 server(s) ok" in stopped.stdout and "wait global step 8: 2 of 2 server(s) ok" in stopped.stdout
    wait_rows = table_rows(stopped.stdout.split("\n\n")[1])
    assert set(wait_rows) == {s.url for s in fleet.live}
    assert all(" regular " in row and " done " in row for row in wait_rows.values()), stopped.stdout  # router's role kept
    for server in fleet.live:
        # no window: everything from the start to the stop, two rollouts of 8 iterations
        assert recorded_iterations(server, 8) == list(range(2 * TOKENS))


def test_a_guarded_router_needs_its_own_key(fleet, routers):
    """sglang-router with control-plane keys: its worker list needs the router's admin key,
    which is not the servers' key."""
    router = routers["guarded"]
    with pytest.raises(DiscoveryError, match="HTTP 401.*router_api_key"):
        RolloutProfiler(router=router.url, api_key=KEY).servers()
    refused = rlprof("status", "--router", router.url, "--api-key", KEY)
    assert refused.returncode == 1 and "error: router" in refused.stdout and "RLPROF_ROUTER_API_KEY" in refused.stdout

    listed = RolloutProfiler(router=router.url, api_key=KEY, router_api_key=ROUTER_KEY).servers()
    assert sorted(s.url for s in listed) == sorted(s.url for s in fleet.live)
    status = rlprof("status", "--router", router.url, "--api-key", KEY, "--router-api-key", ROUTER_KEY, "--json")
    assert status.returncode == 0, status.stdout
    assert sorted(a["url"] for a in json.loads(status.stdout)["actions"][0]["servers"]) == sorted(
        s.url for s in fleet.live)


def test_cli_usage_errors_exit_2():
    assert rlprof("start", "--global-step", "1").returncode == 2  # no server named
    assert rlprof("start", "--url", "http://127.0.0.1:1", "--global-step", "-1").returncode == 2
