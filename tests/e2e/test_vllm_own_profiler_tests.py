"""What vLLM's own profiler route tests assert, asserted here with rlprof installed and, beside it, with rlprof
disabled (``RLPROF_DISABLE=1``): the same answers, and a trace where vLLM writes one.

vLLM's ``tests/entrypoints/serve/test_profile_api_router.py`` holds its ``/start_profile``:

- a start without a body is answered 200 (the zero-argument call older clients make);
- a start whose body is a completion request (fields the route does not define) is answered 200: unknown
  fields are ignored;
- ``profile_prefix``, ``delay_iterations`` and ``max_iterations`` are taken (200);
- a number given as a string (``"1"``, ``"20"``) is refused: the route's model is strict (upstream's test
  expects FastAPI's 422 from a bare router; the API server's own handler answers 400, naming the field).

Each server here is a real vLLM 0.32 server on CPU started with ``--profiler-config`` naming the torch
profiler and a directory (vLLM mounts the route only then). Where rlprof deliberately differs (files written
off the engine thread, the manifest and step logs beside the traces) docs/compatibility.md says so.
"""

import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm


# rlprof's side in make test; the native twin (the same assertions with rlprof disabled) in make test-extended,
# for CI's time: it holds what the engine's own tests hold, and changes only with the engine release
@pytest.fixture(scope="module", params=["rlprof", pytest.param("native", marks=pytest.mark.extended)])
def served(request, tmp_path_factory):
    from tests.helpers.vllm_server import start_server

    tmp = tmp_path_factory.mktemp(f"vllm-own-tests-{request.param}")
    env = {"RLPROF_DISABLE": "1"} if request.param == "native" else {}
    server = start_server(tmp, {"profiler": "torch", "torch_profiler_dir": str(tmp / "traces"),
                                "torch_profiler_with_stack": False}, env=env)
    server.kind = request.param
    yield server
    server.stop()


def traces_in(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.pt.trace.json*") if "async_llm" not in p.name) if folder.is_dir() else []


def until_traces(folder: Path, before: list[Path], timeout: float = 120) -> list[Path]:
    deadline = time.time() + timeout
    while time.time() < deadline:
        new = [p for p in traces_in(folder) if p not in before]
        if new:
            return new
        time.sleep(0.2)
    return []


def profile_once(server, body) -> list[Path]:
    """Start (``body`` as given: None sends none), one completion, stop; the traces the session wrote."""
    before = traces_in(server.trace_dir)
    r = server.post("/start_profile", body)
    assert r.status_code == 200, r.text
    server.complete(max_tokens=8)
    stop = server.post("/stop_profile")
    assert stop.status_code == 200, stop.text
    return until_traces(server.trace_dir, before)


def test_a_start_without_a_body(served):
    assert profile_once(served, None)


def test_a_completion_payload_is_ignored_as_unknown_fields(served):
    assert profile_once(served, {"model": "some/model", "prompt": "profile this request", "max_tokens": 16,
                                 "stream": False})


def test_the_session_overrides_are_taken(served):
    written = profile_once(served, {"profile_prefix": "sharegpt_run-1", "delay_iterations": 1, "max_iterations": 20})
    assert written and all(p.name.startswith("sharegpt_run-1") or "sharegpt_run-1" in str(p) for p in written), written


@pytest.mark.parametrize("body", [{"delay_iterations": "1"}, {"max_iterations": "20"}, {"profile_prefix": 5}])
def test_a_value_of_the_wrong_type_is_vllms_own_answer_on_both(served, body):
    """vLLM's own handler of a body its strict model refuses: 400, its error object naming the field."""
    r = served.post("/start_profile", body)
    assert r.status_code == 400, (served.kind, r.text)
    error = r.json()["error"]
    assert error["type"] == "Bad Request" and error["param"] == f"body.{next(iter(body))}", (served.kind, error)
    served.complete(max_tokens=4)  # serving on


def test_a_second_start_is_409_and_a_stop_with_nothing_running_is_answered(served):
    """vLLM's own ``WorkerProfiler`` (its ``tests/v1/worker/test_gpu_profiler.py``) ignores a stop while no profile is
    active, and its API server refuses a second start with 409 (``ProfilerAlreadyActiveError``) while the first
    session goes on. With rlprof: the same answers, the first session writes its traces, and the ignored stop
    says so in its answer."""
    before = traces_in(served.trace_dir)
    assert served.post("/start_profile").status_code == 200
    second = served.post("/start_profile", {"profile_prefix": "second-start"})
    assert second.status_code == 409, (served.kind, second.text)
    served.complete(max_tokens=8)
    assert served.post("/stop_profile").status_code == 200
    written = until_traces(served.trace_dir, before)
    assert written and not any("second-start" in str(p) for p in written), written
    nothing = served.post("/stop_profile")
    assert nothing.status_code == 200, (served.kind, nothing.text)
    if served.kind == "rlprof":
        assert second.json()["error"]["type"] == "conflict"
        assert nothing.json()["status"] == "ignored" and "no profiling session" in nothing.json()["warnings"][0]


def test_a_stop_inside_the_delay_records_nothing(served):
    """vLLM's own test: a stop before ``delay_iterations`` have passed ends a profile that never started. The
    traces written before the next profile's are that profile's alone (each server writes its sessions in
    order)."""
    before = traces_in(served.trace_dir)
    assert served.post("/start_profile", {"delay_iterations": 100000}).status_code == 200
    served.complete(max_tokens=4)
    assert served.post("/stop_profile").status_code == 200
    written = profile_once(served, {"profile_prefix": "after-the-delay"})
    assert written and all("after-the-delay" in str(p) for p in written), (served.kind, written)
    assert all(p in before or "after-the-delay" in str(p) for p in traces_in(served.trace_dir))
