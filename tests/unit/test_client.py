"""The trainer-side client's pure parts: URLs, router listings, answers, the table.

Its behaviour against real servers and routers is in
tests/e2e/test_trainer_control.py; here, what each piece makes of the inputs
it is given (the listing shapes are those of the real routers' answers).
"""

import pytest

from rlprof_plugins.cli.command import main
from rlprof_plugins.client import FleetError, FleetResult, RolloutProfiler, Server, ServerResult
from rlprof_plugins.client.commands import render
from rlprof_plugins.client.discovery import from_listing, normalise
from rlprof_plugins.client.http import Reply, call
from rlprof_plugins.client.answers import session_answer, settled, stop_answer
from tests.helpers.vllm_server import free_port

# vllm-router 0.1.17 and sglang-router 0.3.2 answers to GET /workers (trimmed), and /list_workers
VLLM_ROUTER_WORKERS = {"workers": [
    {"url": "http://10.0.0.2:8000", "model_id": "unknown", "worker_type": "regular", "is_healthy": True},
    {"url": "http://10.0.0.3:8000", "model_id": "unknown", "worker_type": "regular", "is_healthy": False}],
    "total": 2, "stats": {"prefill_count": 0, "decode_count": 0, "regular_count": 2}}
PD_WORKERS = {"workers": [{"url": "http://p:8000", "worker_type": "prefill"},
                          {"url": "http://d:8000@0", "worker_type": "decode"},
                          {"url": "http://d:8000@1", "worker_type": "decode"}]}
LIST_WORKERS = {"urls": ["http://10.0.0.2:8000/", "10.0.0.3:8000"]}


def test_normalise_urls():
    assert normalise("10.0.0.2:8000") == "http://10.0.0.2:8000"
    assert normalise(" https://rollout-3:8443/ ") == "https://rollout-3:8443"
    assert normalise("http://d:8000@1") == "http://d:8000"  # a DP rank of one server
    with pytest.raises(ValueError):
        normalise("  ")


def test_router_listings_of_both_shapes():
    assert from_listing(VLLM_ROUTER_WORKERS) == [Server("http://10.0.0.2:8000", "regular"),
                                                 Server("http://10.0.0.3:8000", "regular")]
    assert from_listing(LIST_WORKERS) == [Server("http://10.0.0.2:8000"), Server("http://10.0.0.3:8000")]
    # prefill and decode workers are all profiled; DP ranks of one server once
    assert from_listing(PD_WORKERS) == [Server("http://p:8000", "prefill"), Server("http://d:8000", "decode")]
    assert from_listing({"workers": []}) == []
    assert from_listing({"detail": "Not Found"}) is None and from_listing(["x"]) is None


def test_configuration_is_checked_naming_the_argument():
    with pytest.raises(ValueError, match="urls/router"):
        RolloutProfiler()
    with pytest.raises(ValueError, match="steps"):
        RolloutProfiler("a:1", steps=[5, -1])
    with pytest.raises(ValueError, match="step_end"):
        RolloutProfiler("a:1", step_end="10")
    with pytest.raises(ValueError, match="on_error"):
        RolloutProfiler("a:1", on_error="ignore")
    profiler = RolloutProfiler("a:1, b:2", steps=[5, 10])
    assert profiler.urls == ["http://a:1", "http://b:2"]
    assert [s for s in range(12) if profiler.profiles(s)] == [5, 10]
    with pytest.raises(ValueError, match="global_step"):
        profiler.start(True)


def test_a_step_outside_the_configured_ones_sends_nothing():
    down = f"http://127.0.0.1:{free_port()}"
    profiler = RolloutProfiler(down, steps=[5], on_error="raise")
    with profiler.step(4) as run:
        pass
    assert not run.profiled and run.start is None and run.ok
    with pytest.raises(FleetError, match="unreachable"):  # step 5 does send, and the failure is raised
        with profiler.step(5):
            pass


def test_call_never_raises_for_an_unreachable_server():
    reply = call(f"http://127.0.0.1:{free_port()}", "GET", "/profile_status")
    assert reply.status == 0 and not reply.reached and reply.error.startswith("unreachable")


def test_answers_become_results_naming_the_field():
    started = session_answer("/start_profile", Reply(200, {"status": "started", "state": "waiting", "global_step": 7,
                                                            "directory": "/t/global_step_7", "files": []}))
    assert started.ok and started.state == "waiting" and started.directory == "/t/global_step_7"
    bad = session_answer("/start_profile", Reply(400, {"error": {"type": "invalid_request", "field": "step_end",
                                                                  "message": "must be greater than step_start (5)"}}))
    assert not bad.ok and bad.error == "HTTP 400: invalid_request: step_end: must be greater than step_start (5)"
    busy = session_answer("/start_profile", Reply(409, {"error": {"type": "conflict",
                                                                   "message": "a profiling session is already running"}}))
    assert busy.error == "HTTP 409: conflict: a profiling session is already running"
    keyless = session_answer("/start_profile", Reply(401, {"error": "Unauthorized"}))
    assert keyless.error.startswith("HTTP 401: Unauthorized") and "RLPROF_API_KEY" in keyless.error
    assert "no /profile_status route" in session_answer("/profile_status", Reply(404, {"detail": "Not Found"})).error
    native = session_answer("/start_profile", Reply(200, {"message": "Start profiling."}))
    assert not native.ok and "without rlprof's session state" in native.error
    failed = session_answer("/profile_status", Reply(200, {"state": "failed", "errors": ["rank0: disk full"]}))
    assert not failed.ok and failed.error == "session failed: rank0: disk full"
    assert stop_answer("/stop_profile", Reply(200, {"status": "already_finished", "state": "done"})).ok
    assert not stop_answer("/stop_profile", Reply(409, {"error": {"type": "conflict", "message": "no profiling "
                                                                   "session is running"}})).ok


def test_waiting_outcomes():
    def status(state):
        return session_answer("/profile_status", Reply(200, {"state": state}))

    assert settled(status("done"), 3, 10, timed_out=False).ok
    assert settled(status("recording"), 3, 10, timed_out=True).error == "still recording after 10 s"
    assert settled(status("idle"), 3, 10, timed_out=False).error == "no profiling session for global step 3"


def test_table_names_every_server_and_counts():
    result = FleetResult("start", [
        ServerResult("http://a:1", True, 200, "waiting", 7, "/t/global_step_7"),
        ServerResult("http://b:2", False, 0, error="unreachable: Connection refused")], global_step=7)
    text = render(result)
    lines = text.splitlines()
    assert lines[0].split() == ["SERVER", "RESULT", "STATE", "STEP", "DETAIL"]
    assert lines[1].split() == ["http://a:1", "ok", "waiting", "7", "/t/global_step_7"]
    assert lines[2].split()[:4] == ["http://b:2", "FAILED", "-", "-"] and lines[2].endswith("Connection refused")
    assert lines[-1] == "start global step 7: 1 of 2 server(s) ok"
    error = FleetError(result)
    assert "start (global step 7) failed on 1 of 2 server(s)" in str(error) and "http://b:2: unreachable" in str(error)


def test_cli_usage_and_a_down_server(capsys):
    for command in (["status"], ["start", "--global-step", "3"], ["stop"], ["step", "5"]):  # no server named
        with pytest.raises(SystemExit) as usage:
            main(command)
        assert usage.value.code == 2 and "--url URL" in capsys.readouterr().err, command
    down = f"127.0.0.1:{free_port()}"
    assert main(["status", "--url", down]) == 1
    out = capsys.readouterr().out
    assert f"http://{down}" in out and "FAILED" in out and "status: 0 of 1 server(s) ok" in out


def test_the_client_imports_no_engine_and_no_torch():
    """Trainers install it next to their own stack: importing it (and the CLI) must not pull in
    an engine or torch, even where they are installed (as in this environment)."""
    import subprocess
    import sys

    code = ("import sys, rlprof_plugins.client, rlprof_plugins.client.commands, rlprof_plugins.cli; "
            "print(sorted(m for m in ('torch', 'vllm', 'sglang', 'requests') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
