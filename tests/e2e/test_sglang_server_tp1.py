"""The real SGLang 0.5.23 server (TP=1) with the plugin: the vLLM scenarios, on SGLang.

Configured with ``--profiler-config`` (window [2, 6) by default, like the vLLM
TP=1 server). One request of 8 tokens is 8 scheduler iterations: 1 prefill
(which samples the first token) and 7 decodes.
"""

import json
import time
from pathlib import Path

import pytest

from tests.helpers.chunked import check_chunked_matches_plain, check_long_session_is_faithful, only
from tests.helpers.installed import imported_package, installed_package
from tests.helpers.sglang_server import SGLANG_PYTHON, cpu_env
from tests.helpers.traces import iteration_details, iteration_indices, load_trace, manifest_traces

ONE_REQUEST_TOKENS = 8


def files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()} if root.exists() else set()


def only_trace(folder: Path, stage: str = "all") -> dict:
    traces = manifest_traces(folder, stage)
    assert list(traces) == ["TP-0"], traces
    return load_trace(traces["TP-0"])


def test_config_window_records_exactly_step_start_to_step_end(sglang_tp1):
    r = sglang_tp1.post("/start_profile", {"global_step": 0})
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "waiting" and r.json()["directory"].endswith("global_step_0")
    sglang_tp1.complete(max_tokens=ONE_REQUEST_TOKENS)
    status = sglang_tp1.wait_state()
    assert status["state"] == "done", status
    folder = sglang_tp1.trace_dir / "global_step_0"
    assert iteration_indices(only_trace(folder)) == [2, 3, 4, 5]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["engine"] == "sglang" and manifest["state"] == "done" and manifest["global_step"] == 0
    # The server's interpreter, in the server's environment, imports the wheel installed in
    # .venv-sglang (SGLang configures its log after the plugin loads: no "loaded from" line).
    assert imported_package(SGLANG_PYTHON, cpu_env()) == installed_package(SGLANG_PYTHON)
    # The window exported by itself; a stop afterwards is harmless, once.
    stop = sglang_tp1.post("/stop_profile")
    assert stop.status_code == 200 and stop.json()["status"] == "already_finished"
    # another stop with nothing running: SGLang's own route answers 200, so rlprof does, saying it was ignored;
    # a stop that asks for rlprof's ``wait`` is told with a 409
    again = sglang_tp1.post("/stop_profile")
    assert again.status_code == 200 and again.json()["status"] == "ignored", again.text
    rlprof_stop = sglang_tp1.post("/stop_profile", {"wait": True})
    assert rlprof_stop.status_code == 409 and "no profiling session" in rlprof_stop.json()["error"]["message"]


def test_window_on_a_warm_server_counts_from_the_request(sglang_tp1):
    """SGLang's start_step keeps its meaning (forward passes from server
    start: one already past begins with the next pass); step_start counts
    from the request."""
    for _ in range(3):
        sglang_tp1.complete(max_tokens=ONE_REQUEST_TOKENS)  # the server has run 24+ iterations
    r = sglang_tp1.post("/start_profile", {"global_step": 4, "start_step": 2, "num_steps": 3})
    assert r.status_code == 200 and (r.json()["step_start"], r.json()["step_end"]) == (0, 3), r.text
    sglang_tp1.complete(max_tokens=ONE_REQUEST_TOKENS)
    assert sglang_tp1.wait_state()["state"] == "done"
    assert sorted(iteration_details(only_trace(sglang_tp1.trace_dir / "global_step_4"))) == [0, 1, 2]
    r = sglang_tp1.post("/start_profile", {"global_step": 5, "step_start": 1, "step_end": 4})
    assert r.status_code == 200, r.text
    sglang_tp1.complete(max_tokens=ONE_REQUEST_TOKENS)
    assert sglang_tp1.wait_state()["state"] == "done"
    details = iteration_details(only_trace(sglang_tp1.trace_dir / "global_step_5"))
    assert sorted(details) == [1, 2, 3]
    assert {d[0] for d in details.values()} == {"decode"}  # iteration 0 (the prefill) is outside the window


def test_three_consecutive_global_steps_each_complete(sglang_tp1):
    for step in (1, 2, 3):
        assert sglang_tp1.post("/start_profile", {"global_step": step}).status_code == 200
        sglang_tp1.complete(max_tokens=ONE_REQUEST_TOKENS)
        assert sglang_tp1.wait_state()["state"] == "done"
    for step in (1, 2, 3):
        assert iteration_indices(only_trace(sglang_tp1.trace_dir / f"global_step_{step}")) == [2, 3, 4, 5], step


def test_stop_driven_session_answers_before_the_profiler_stops(sglang_tp1):
    r = sglang_tp1.post("/start_profile", {"global_step": 10, "step_start": 0, "step_end": None})
    # The idle scheduler's busy loop is not recorded: recording begins with the first iteration.
    assert r.status_code == 200 and r.json()["state"] == "waiting"
    time.sleep(2)
    assert sglang_tp1.get("/profile_status").json()["state"] == "waiting"
    sglang_tp1.complete(max_tokens=ONE_REQUEST_TOKENS)
    # the chunk's stop so far: when the scheduler went idle after the request (waited for: it parks after
    # sending the answer, and a status read before that races it)
    parked = sglang_tp1.wait_parked()
    assert parked["ranks"][0]["parked"], parked
    before = parked["ranks"][0]["stop_seconds"]
    stop = sglang_tp1.post("/stop_profile", {"wait": False})
    assert stop.status_code == 200 and stop.json()["status"] == "stopped", stop.text
    assert stop.json()["state"] == "exporting"
    assert [rank["stop_seconds"] for rank in stop.json()["ranks"]] == [before]  # answered first
    done = sglang_tp1.wait_state()
    assert done["state"] == "done" and done["ranks"][0]["stop_seconds"] is not None
    details = iteration_details(only_trace(sglang_tp1.trace_dir / "global_step_10"))
    assert sorted(details) == list(range(ONE_REQUEST_TOKENS))
    assert [details[i][0] for i in sorted(details)] == ["prefill"] + ["decode"] * (ONE_REQUEST_TOKENS - 1)


def test_stop_returns_once_the_files_are_written(sglang_tp1):
    """SGLang's own stop returns after its export; rlprof's returns once the
    background export is done (the scheduler served meanwhile)."""
    assert sglang_tp1.post("/start_profile", {"global_step": 12, "step_start": 0, "step_end": None}).status_code == 200
    sglang_tp1.complete(max_tokens=ONE_REQUEST_TOKENS)
    stop = sglang_tp1.post("/stop_profile")
    assert stop.status_code == 200 and stop.json()["state"] == "done", stop.text
    assert stop.json()["files"] and all(Path(f).exists() for f in stop.json()["files"])
    log = sglang_tp1.log()
    folder = sglang_tp1.trace_dir / "global_step_12"
    assert f"rlprof: profiling stopped: global step 12, state done, folder {folder}" in log


def test_native_fields_map_onto_rlprof_sessions(sglang_tp1):
    body = {"global_step": 20, "num_steps": 3, "profile_prefix": "rollout", "activities": ["CPU"],
            "with_stack": False, "record_shapes": True, "profile_id": "my-run"}
    r = sglang_tp1.post("/start_profile", body)
    assert r.status_code == 200, r.text
    assert r.json()["step_start"] == 2 and r.json()["step_end"] == 5  # num_steps counts from step_start
    assert r.json()["session_id"] == "my-run"
    sglang_tp1.complete(max_tokens=ONE_REQUEST_TOKENS)
    assert sglang_tp1.wait_state()["state"] == "done"
    folder = sglang_tp1.trace_dir / "global_step_20"
    (path,) = manifest_traces(folder).values()
    assert path.name.startswith("rollout-TP-0.")  # SGLang's rank naming, with the prefix
    trace = load_trace(path)
    assert iteration_indices(trace) == [2, 3, 4]
    assert any("Input Dims" in (e.get("args") or {}) for e in trace["traceEvents"])  # record_shapes honoured


def test_sampled_python_stacks_record_the_scheduler_thread_not_torchs_tracer(sglang_tp1):
    """A server whose configuration writes no stack key, and slime's body (SGLang's own ``with_stack:
    false``, which turns exact stacks off and keeps the sampler): the scheduler's Python stack sampled,
    torch's exact stacks off; SGLang's own functions in the report's view.

    What a sample must reach is asserted, not what it may: every stage holding an iteration longer than the
    sampler's longest wait (1.5 ms at 1,000 Hz; ``spin_shares.stages_a_sample_must_reach`` gives the argument).
    The step certainly holds 23 decode iterations of one request, and each outlasts that wait: SGLang's CPU
    decode iterations of the tiny model took 6.3-15 ms here quietly and 6.3-64 ms beside a CPU-bound neighbour
    (three sessions each, 2026-11-27), over four times the wait at the shortest. Its one prefill, of a short
    prompt, is asserted where it outlasted the wait too (``stages_a_sample_must_reach``)."""
    from tests.helpers.spin_shares import assert_sampled_on_engine_thread

    body = {"global_step": 57, "step_start": 0, "step_end": 24, "with_stack": False, "sample_hz": 1000}
    assert sglang_tp1.post("/start_profile", body).status_code == 200
    sglang_tp1.complete(max_tokens=24)
    assert sglang_tp1.wait_state()["state"] == "done"
    (trace,) = manifest_traces(sglang_tp1.trace_dir / "global_step_57").values()
    python, must = assert_sampled_on_engine_thread(trace, ("event_loop_normal", "run_batch", "event_loop_overlap",
                                                           "forward", "process_batch_result"))
    assert "decode" in must and "decode" in python


def test_by_stage_traces_hold_only_their_stage(sglang_tp1):
    r = sglang_tp1.post("/start_profile", {"global_step": 30, "profile_by_stage": True, "step_start": 0,
                                           "step_end": ONE_REQUEST_TOKENS})
    assert r.status_code == 200 and r.json()["by_stage"] is True
    sglang_tp1.complete(max_tokens=ONE_REQUEST_TOKENS)
    assert sglang_tp1.wait_state()["state"] == "done"
    folder = sglang_tp1.trace_dir / "global_step_30"
    prefill, decode = only_trace(folder, "prefill"), only_trace(folder, "decode")
    assert iteration_indices(prefill) == [0]
    assert iteration_indices(decode) == list(range(1, ONE_REQUEST_TOKENS))
    assert not manifest_traces(folder)  # no unsplit trace


def test_without_global_step_files_land_in_the_output_dir(sglang_tp1):
    """With ``step_source: request`` (the default) a weight version the trainer set changes nothing."""
    version = sglang_tp1.post("/update_weight_version", {"new_version": "5", "abort_all_requests": False})
    assert version.status_code == 200 and sglang_tp1.get("/model_info").json()["weight_version"] == "5"
    before = files_under(sglang_tp1.trace_dir)
    start = sglang_tp1.post("/start_profile", {"step_start": 0, "step_end": 2})
    assert start.status_code == 200 and start.json()["global_step"] is None and "warnings" not in start.json()
    sglang_tp1.complete()
    status = sglang_tp1.wait_state()
    assert status["state"] == "done" and status["step_source"] is None
    new = files_under(sglang_tp1.trace_dir) - before
    assert {p.parent for p in new} == {sglang_tp1.trace_dir.resolve()}
    (trace,) = new
    assert trace.name.startswith("TP-0.") and iteration_indices(load_trace(trace)) == [0, 1]


@pytest.mark.parametrize("body, field", [
    ({"global_stpe": 1}, "global_stpe"),
    ({"global_step": -1}, "global_step"),
    ({"global_step": 1, "output_dir": "/tmp"}, "output_dir"),  # outside the allowed directories
    ({"global_step": 1, "start_step": 5, "step_end": 9}, "step_end"),
    ({"global_step": 1, "activities": ["GPU"]}, "activities"),  # no CUDA on this host
    ({"global_step": 1, "profile_stages": ["prefill"]}, "profile_stages"),
    ({"global_step": 1, "num_steps": 2, "step_end": 4}, "num_steps"),
    ({"global_step": 1, "activities": ["MEM"]}, "activities"),  # SGLang's memory history: no CUDA here
    ({"global_step": 1, "memory": True}, "memory"),
    ({"global_step": 1, "step_start": 3, "step_end": 3}, "step_end"),
    ({"global_step": 1, "chunk_iterations": -1}, "chunk_iterations"),
    ({"global_step": 1, "chunk_iterations": "x"}, "chunk_iterations"),
    ({"global_step": 1, "max_pause_ms": 0}, "max_pause_ms"),
    ("[1, 2]", "body"),
    ("{not json", "body"),
])
def test_bad_bodies_get_400_naming_the_field_and_write_nothing(sglang_tp1, body, field):
    before = files_under(sglang_tp1.trace_dir)
    r = sglang_tp1.post("/start_profile", body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["field"] == field
    assert files_under(sglang_tp1.trace_dir) == before
    assert sglang_tp1.get("/profile_status").json()["state"] in ("done", "idle")


def test_double_start_is_409_and_the_first_session_goes_on(sglang_tp1):
    """A second start naming rlprof's fields is told with a 409; one with SGLang's own fields alone is answered as
    SGLang's own route answers it (200), ignored and saying so. Either way the first session goes on."""
    assert sglang_tp1.post("/start_profile", {"global_step": 40, "step_end": None}).status_code == 200
    second = sglang_tp1.post("/start_profile", {"global_step": 41})
    assert second.status_code == 409 and second.json()["error"]["session"]["global_step"] == 40
    native = sglang_tp1.post("/start_profile", {"num_steps": 3, "with_stack": False})
    assert native.status_code == 200 and native.json()["status"] == "ignored", native.text
    assert native.json()["global_step"] == 40 and "already running" in native.json()["warnings"][0]
    sglang_tp1.complete()
    assert sglang_tp1.post("/stop_profile").status_code == 200
    assert sglang_tp1.wait_state()["state"] == "done"
    assert not (sglang_tp1.trace_dir / "global_step_41").exists()
    status = sglang_tp1.get("/profile_status?global_step=40").json()
    assert status["global_step"] == 40 and status["state"] == "done"
    assert sglang_tp1.get("/profile_status?global_step=x").status_code == 400


def test_chunked_session_records_what_a_plain_one_records(sglang_tp1):
    """chunk_iterations on SGLang's scheduler thread: the same operators in
    every iteration, the same stacks, one checked trace."""
    check_chunked_matches_plain(sglang_tp1, {"with_stack": True}, lambda folder: only(manifest_traces(folder)))


def test_a_long_chunked_session_is_faithful(sglang_tp1):
    """Stacks on, 30 iterations in chunks of 8: each of the profiler's stops is
    marked in the trace, HolisticTraceAnalysis finds the iterations, the trace checks."""
    check_long_session_is_faithful(sglang_tp1, {"with_stack": True}, lambda folder: only(manifest_traces(folder)))


# `make test-extended` (CI's 25 minutes: docs/testing.md): in CI, the idle hook parking each chunk between bursts
# (tests/unit/test_idle_chunks.py) and the pauses of every live session on both TP=1 servers
@pytest.mark.extended
def test_bursts_with_idle_gaps_record_no_idle_scheduler(sglang_tp1):
    """Stacks on (SGLang's default), rlprof's default chunks over bursts 0.5 s apart, stopped
    mid-burst: the scheduler stays under 4 GB, each chunk ended at a wait or the stop, no pause as long
    as the one torch session's stop, no more recorded than that session (``bursty.check_bursty_session``)."""
    from tests.helpers.bursty import check_bursty_session

    numbers = check_bursty_session(sglang_tp1, ("sglang::schedul",), {"with_stack": True}, 120)
    print("bursty SGLang:", json.dumps(numbers))


def test_ten_steps_in_a_row_under_streams_leave_the_server_as_it_was(sglang_tp1):
    """The soak's short variant (the hundred-step one: ``tests/e2e/test_soak.py``): ten sampled-stacks steps back
    to back under streaming traffic, every one ``done``, every request answered, the process tree within 64 MB of
    after the first step, no crash and no ``EINTR`` from a wait the sampler's signal interrupted in the log."""
    from tests.helpers.soak import check_short

    check_short(sglang_tp1, "sglang")


def test_a_rollout_steps_long_tail_is_the_time_its_longest_request_ran_alone(sglang_tp1):
    """Every prompt at once, one response ten times longer: the step's tail in the step log is the time that
    response ran alone, as the client saw it, and the report names that response as the one that held the step
    (tests/helpers/rollout_tail.py; this server serves no ``/metrics``)."""
    from tests.helpers.rollout_tail import check_tail

    check_tail(sglang_tp1, 38)


def test_a_trainers_calls_between_generations_are_timed_into_the_step(sglang_tp1):
    """A weight update from disk (the cache flush it does itself is part of it), a cache flush, a pause and a
    resume: each one phase of the step, inside the window the caller saw (tests/helpers/rl_phases.py)."""
    from tests.helpers.rl_phases import check_phases
    from tests.helpers.vllm_server import TINY_MODEL

    phases = check_phases(sglang_tp1, 72, [
        ("/update_weights_from_disk", {"model_path": str(TINY_MODEL)}), ("/flush_cache", {}),
        ("/pause_generation", {"mode": "in_place"}), ("/continue_generation", {"torch_empty_cache": False})],
        [("weight_update", "update_weights_from_disk"), ("cache_reset", "flush_cache"),
         ("pause", "pause_generation"), ("resume", "continue_generation")])
    assert phases[2]["detail"] == "mode=in_place"


def test_the_flight_recorder_writes_what_went_wrong_and_nothing_else(sglang_tp1, tmp_path):
    """Last in the module: the flight recorder ran with the defaults through all of the above with no dump; then a
    stopped scheduler, a requested dump and a slow step, each written and reported (tests/helpers/flight.py; this
    server serves no /metrics: SGLang's needs --enable-metrics, tests/e2e/test_step_metrics_live.py)."""
    from tests.helpers.flight import check_live

    check_live(sglang_tp1, ("sglang::schedul",), tmp_path, metrics=False)
