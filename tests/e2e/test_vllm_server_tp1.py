"""The real vLLM 0.32 server (TP=1) with the plugin: folders, windows, errors."""

import threading
import time
from pathlib import Path

import pytest

from tests.helpers.traces import iteration_indices, load_trace, rank_traces

ONE_REQUEST_TOKENS = 8  # one request, ignore_eos: 1 prefill + 7 decode iterations


def files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()} if root.exists() else set()


def test_config_window_records_exactly_step_start_to_step_end(server_tp1):
    r = server_tp1.post("/start_profile", {"global_step": 0})
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "waiting" and r.json()["directory"].endswith("global_step_0")
    server_tp1.complete(max_tokens=ONE_REQUEST_TOKENS)
    status = server_tp1.wait_state()
    assert status["state"] == "done", status
    folder = server_tp1.trace_dir / "global_step_0"
    traces = rank_traces(folder)
    assert list(traces) == ["rank0"]
    assert iteration_indices(load_trace(traces["rank0"])) == [2, 3, 4, 5]
    assert list(folder.glob("*.async_llm.*.pt.trace.json.gz")), "frontend trace missing"
    # The window exported by itself; a stop afterwards is harmless, once.
    stop = server_tp1.post("/stop_profile")
    assert stop.status_code == 200 and stop.json()["status"] == "already_finished"
    again = server_tp1.post("/stop_profile")
    assert again.status_code == 409
    assert "no profiling session" in again.json()["error"]["message"]


def test_three_consecutive_global_steps_each_complete(server_tp1):
    for step in (1, 2, 3):
        assert server_tp1.post("/start_profile", {"global_step": step}).status_code == 200
        server_tp1.complete(max_tokens=ONE_REQUEST_TOKENS)
        assert server_tp1.wait_state()["state"] == "done"
    for step in (1, 2, 3):
        traces = rank_traces(server_tp1.trace_dir / f"global_step_{step}")
        assert iteration_indices(load_trace(traces["rank0"])) == [2, 3, 4, 5], step


def test_stop_driven_session_counts_every_engine_iteration(server_tp1):
    r = server_tp1.post("/start_profile", {"global_step": 10, "step_start": 0, "step_end": None})
    assert r.status_code == 200 and r.json()["state"] == "recording"
    server_tp1.complete(max_tokens=ONE_REQUEST_TOKENS)
    stop = server_tp1.post("/stop_profile")
    assert stop.status_code == 200 and stop.json()["status"] == "stopped"
    trace = load_trace(rank_traces(server_tp1.trace_dir / "global_step_10")["rank0"])
    assert iteration_indices(trace) == list(range(ONE_REQUEST_TOKENS))


def test_without_global_step_files_land_where_vllm_puts_them(server_tp1):
    before = files_under(server_tp1.trace_dir)
    assert server_tp1.post("/start_profile", {"step_start": 0, "step_end": 2}).status_code == 200
    server_tp1.complete()
    assert server_tp1.wait_state()["state"] == "done"
    new = files_under(server_tp1.trace_dir) - before
    assert {p.parent for p in new} == {server_tp1.trace_dir.resolve()}
    rank = [p for p in new if p.name.startswith("rank0.") and p.name.endswith(".pt.trace.json.gz")]
    assert len(rank) == 1 and iteration_indices(load_trace(rank[0])) == [0, 1]


def test_prefix_and_native_window_fields(server_tp1):
    body = {"global_step": 20, "profile_prefix": "rollout", "delay_iterations": 1, "max_iterations": 2}
    assert server_tp1.post("/start_profile", body).status_code == 200
    server_tp1.complete()
    assert server_tp1.wait_state()["state"] == "done"
    (trace,) = (server_tp1.trace_dir / "global_step_20").glob("rollout_rank0.*.pt.trace.json.gz")
    assert iteration_indices(load_trace(trace)) == [1, 2]


@pytest.mark.parametrize(
    "body, field",
    [
        ({"global_step": -1}, "global_step"),
        ({"global_step": "5"}, "global_step"),
        ({"global_step": "../../tmp/evil"}, "global_step"),
        ({"global_step": 1.5}, "global_step"),
        ({"global_step": 1, "step_start": 4, "step_end": 4}, "step_end"),
        ({"global_step": 1, "step_start": -2}, "step_start"),
        ({"global_stpe": 1}, "global_stpe"),
        ({"profile_prefix": "../up"}, "profile_prefix"),
        ("[1, 2]", "body"),
        ("{not json", "body"),
    ],
)
def test_bad_bodies_get_400_naming_the_field_and_write_nothing(server_tp1, body, field):
    before = files_under(server_tp1.trace_dir.parent)
    r = server_tp1.post("/start_profile", body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["field"] == field
    assert files_under(server_tp1.trace_dir.parent) - before == set()
    assert server_tp1.get("/profile_status").json()["state"] not in ("waiting", "recording")


def test_conflicts_get_409_while_completions_keep_being_served(server_tp1):
    results, stop = [], threading.Event()

    def traffic():
        while not stop.is_set():
            try:
                server_tp1.complete(max_tokens=4)
                results.append(200)
            except AssertionError as e:  # complete() asserts 200
                results.append(str(e))

    t = threading.Thread(target=traffic)
    t.start()
    try:
        start = server_tp1.post("/start_profile", {"global_step": 30, "step_start": 0, "step_end": None})
        assert start.status_code == 200
        second = server_tp1.post("/start_profile", {"global_step": 31})
        assert second.status_code == 409
        assert second.json()["error"]["session"]["global_step"] == 30
        time.sleep(1.0)
        assert server_tp1.post("/stop_profile").status_code == 200
        nothing = server_tp1.post("/stop_profile")
        assert nothing.status_code == 409 and nothing.json()["error"]["type"] == "conflict"
        time.sleep(0.5)
    finally:
        stop.set()
        t.join(60)
    assert results and all(r == 200 for r in results), results
    assert not (server_tp1.trace_dir / "global_step_31").exists()
    trace = load_trace(rank_traces(server_tp1.trace_dir / "global_step_30")["rank0"])
    assert len(iteration_indices(trace)) > 0
