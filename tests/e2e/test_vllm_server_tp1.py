"""The real vLLM 0.32 server (TP=1) with the plugin: folders, windows, errors."""

import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.helpers.chunked import check_chunked_matches_plain, check_long_session_is_faithful, only
from tests.helpers.installed import installed_package, loaded_from
from tests.helpers.traces import iteration_details, iteration_indices, load_trace, rank_folder, rank_traces

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
    # Every engine process (API server, EngineCore, worker) ran the plugin of the installed wheel.
    assert loaded_from(server_tp1.log_path.read_text()) == {str(installed_package(sys.executable))}
    assert iteration_indices(load_trace(traces["rank0"])) == [2, 3, 4, 5]
    assert list((folder / "frontend").glob("*.async_llm.*.pt.trace.json.gz")), "frontend trace missing"
    # The window exported by itself; a stop afterwards is harmless, once.
    stop = server_tp1.post("/stop_profile")
    assert stop.status_code == 200 and stop.json()["status"] == "already_finished"
    # another stop with nothing running: vLLM's own route answers 200 and ignores it, so rlprof does, saying so;
    # a stop that asks for rlprof's ``wait`` is told with a 409
    again = server_tp1.post("/stop_profile")
    assert again.status_code == 200 and again.json()["status"] == "ignored", again.text
    assert "no profiling session" in again.json()["warnings"][0]
    rlprof_stop = server_tp1.post("/stop_profile", {"wait": True})
    assert rlprof_stop.status_code == 409 and "no profiling session" in rlprof_stop.json()["error"]["message"]


def test_sampled_python_stacks_record_the_engine_thread_not_torchs_tracer(server_tp1):
    """A server whose configuration writes no stack key, and a start that asks for none (only a faster
    ``sample_hz``): the worker's Python stack sampled on its own thread, torch's exact stacks off; the
    report's per-stage view names vLLM's own functions.

    What a sample must reach is asserted, not what it may: every stage holding an iteration longer than the
    sampler's longest wait (1.5 ms at 1,000 Hz; ``spin_shares.stages_a_sample_must_reach`` gives the argument).
    The step certainly holds 23 decode iterations and one prefill of a 181-token prompt (53 once cached); vLLM's
    CPU iterations of the tiny model took 6.9-18 ms (decode) and 13-39 ms (that prefill) here, quiet or beside a
    CPU-bound neighbour (three sessions each, 2026-11-27), over four times the wait at the shortest: the decode
    stage must be sampled, and the prefill wherever it outlasted the wait (``stages_a_sample_must_reach``)."""
    from tests.helpers.spin_shares import assert_sampled_on_engine_thread

    body = {"global_step": 57, "step_start": 0, "step_end": 24, "sample_hz": 1000}  # stacks: the default
    assert server_tp1.post("/start_profile", body).status_code == 200
    server_tp1.complete(prompt="the rollout engine " * 60, max_tokens=24)
    assert server_tp1.wait_state()["state"] == "done"
    python, must = assert_sampled_on_engine_thread(rank_traces(server_tp1.trace_dir / "global_step_57")["rank0"],
                                                   ("execute_model", "run_busy_loop", "step", "sample_tokens"))
    assert "decode" in must and "decode" in python
    bad = server_tp1.post("/start_profile", {"global_step": 58, "python_stacks": "sampled",
                                             "profiler_kwargs": {"with_stack": True}})
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "python_stacks"


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
    # the chunks' stops so far: at the idle start and when the engine went idle after the request (waited for:
    # the engine parks after sending the answer, and a status read before that races it)
    parked = server_tp1.wait_parked()
    assert parked["ranks"][0]["parked"], parked
    before = parked["ranks"][0]["stop_seconds"]
    stop = server_tp1.post("/stop_profile", {"wait": False})
    assert stop.status_code == 200 and stop.json()["status"] == "stopped"
    assert stop.json()["state"] == "exporting"  # with wait false the export does not hold the answer
    # nor does a further stop of the profiler: none runs while the engine is parked
    assert [rank["stop_seconds"] for rank in stop.json()["ranks"]] == [before]
    done = server_tp1.wait_state()
    assert done["state"] == "done" and done["ranks"][0]["stop_seconds"] is not None
    trace = load_trace(rank_traces(server_tp1.trace_dir / "global_step_10")["rank0"])
    assert iteration_indices(trace) == list(range(ONE_REQUEST_TOKENS))


def test_stop_returns_once_the_files_are_written_and_the_log_says_so(server_tp1):
    """vLLM's own contract (clients move the files when the stop returns), with
    rlprof's lines in vLLM's log: start, stop and the write, naming the folder."""
    assert server_tp1.post("/stop_profile", {"wait": "no"}).json()["error"]["field"] == "wait"
    assert server_tp1.post("/start_profile", {"global_step": 11, "step_start": 0, "step_end": None}).status_code == 200
    server_tp1.complete(max_tokens=ONE_REQUEST_TOKENS)
    stop = server_tp1.post("/stop_profile")
    assert stop.status_code == 200 and stop.json()["state"] == "done", stop.text
    files = [Path(f) for f in stop.json()["files"]]
    assert len(files) == 2 and all(f.exists() for f in files)  # the worker's trace and the API server's
    assert stop.json()["waited_seconds"] >= 0 and "wait_timed_out" not in stop.json()
    folder = server_tp1.trace_dir / "global_step_11"
    log = server_tp1.log()
    assert f"rlprof: profiling started: global step 11, state recording, folder {folder}" in log
    assert f"rlprof: profiling stopped: global step 11, state done, folder {folder}" in log
    assert f"into {folder} in" in log  # the worker's write
    assert " INFO " in log.split("rlprof: profiling started: global step 11")[0].splitlines()[-1]  # vLLM's format


def test_without_global_step_files_land_where_vllm_puts_them(server_tp1):
    before = files_under(server_tp1.trace_dir)
    assert server_tp1.post("/start_profile", {"step_start": 0, "step_end": 2}).status_code == 200
    server_tp1.complete()
    assert server_tp1.wait_state()["state"] == "done"
    new = files_under(server_tp1.trace_dir) - before
    assert {p.parent for p in new} == {server_tp1.trace_dir.resolve()}
    rank = [p for p in new if p.name.startswith("rank0.") and p.name.endswith(".pt.trace.json.gz")]
    assert len(rank) == 1 and iteration_indices(load_trace(rank[0])) == [0, 1]
    assert not any(p.name == "manifest.json" for p in new)  # manifests are for step folders only


def test_sglang_start_step_counts_forward_passes_from_server_start(server_tp1):
    """SGLang's ``start_step`` means the same on vLLM: the worker's forward
    pass number; on this warm server pass 1 is long past, so recording
    begins with the next pass."""
    server_tp1.complete()
    r = server_tp1.post("/start_profile", {"global_step": 21, "start_step": 1, "num_steps": 2})
    assert r.status_code == 200 and (r.json()["step_start"], r.json()["step_end"]) == (0, 2), r.text
    server_tp1.complete()
    assert server_tp1.wait_state()["state"] == "done"
    (trace,) = rank_folder(server_tp1.trace_dir / "global_step_21").glob("rank0.*.pt.trace.json.gz")
    assert iteration_indices(load_trace(trace)) == [0, 1]


def test_prefix_and_native_window_fields(server_tp1):
    body = {"global_step": 20, "profile_prefix": "rollout", "delay_iterations": 1, "max_iterations": 2}
    assert server_tp1.post("/start_profile", body).status_code == 200
    server_tp1.complete()
    assert server_tp1.wait_state()["state"] == "done"
    (trace,) = rank_folder(server_tp1.trace_dir / "global_step_20").glob("rollout_rank0.*.pt.trace.json.gz")
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
        ({"global_step": 1, "activities": ["GPU"]}, "activities"),  # SGLang's field; no CUDA on this host
        ({"global_step": 1, "memory": True}, "memory"),  # no device allocator history on this host
        ({"global_step": 1, "activities": ["CPU", "MEM"]}, "activities"),  # SGLang's word for it
        ({"global_step": 1, "profile_stages": ["prefill"]}, "profile_stages"),
        ({"global_step": 1, "delay_iterations": 1, "step_start": 2}, "delay_iterations"),
        ({"global_step": 1, "chunk_iterations": -1}, "chunk_iterations"),
        ({"global_step": 1, "chunk_iterations": "x"}, "chunk_iterations"),
        ({"global_step": 1, "max_pause_ms": 0}, "max_pause_ms"),
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
        deadline = time.time() + 120  # the live traffic's iterations recorded before the stop: waited for, not slept
        while server_tp1.get("/profile_status").json()["ranks"][0]["iterations_recorded"] < 3 and time.time() < deadline:
            time.sleep(0.05)
        assert server_tp1.post("/stop_profile").status_code == 200
        nothing = server_tp1.post("/stop_profile", {"wait": False})  # rlprof's field: told with a 409
        assert nothing.status_code == 409 and nothing.json()["error"]["type"] == "conflict"
        assert server_tp1.wait_state()["state"] == "done"  # traffic goes on during the export
        time.sleep(0.5)
    finally:
        stop.set()
        t.join(60)
    assert results and all(r == 200 for r in results), results
    assert not (server_tp1.trace_dir / "global_step_31").exists()
    trace = load_trace(rank_traces(server_tp1.trace_dir / "global_step_30")["rank0"])
    assert len(iteration_indices(trace)) > 0


def test_by_stage_splits_every_iteration_into_exactly_one_stage(server_tp1):
    r = server_tp1.post("/start_profile", {"global_step": 40, "step_start": 0, "step_end": 12, "by_stage": True})
    assert r.status_code == 200 and r.json()["by_stage"] is True
    # a rollout batch: staggered requests give prefill, decode and mixed iterations
    with ThreadPoolExecutor(3) as pool:
        list(pool.map(lambda k: (time.sleep(0.15 * k), server_tp1.complete(f"prompt {k} the rollout", 8)), range(3)))
    status = server_tp1.wait_state()
    assert status["state"] == "done", status
    folder = server_tp1.trace_dir / "global_step_40"
    assert not rank_traces(folder), "by_stage writes stage files, not a whole-window trace"
    per_stage = {}
    for stage in ("prefill", "decode"):
        (path,) = rank_folder(folder, stage).glob(f"rank0.*.{stage}.pt.trace.json.gz")
        trace = load_trace(path)
        details = iteration_details(trace)
        assert all(d[0] == stage for d in details.values())
        for index, (_, prefill_tokens, decode_tokens, batch) in details.items():
            assert batch >= 1
            assert (prefill_tokens > 0) if stage == "prefill" else (prefill_tokens == 0 and decode_tokens > 0)
        assert_events_inside_iterations(trace)
        per_stage[stage] = set(details)
    assert per_stage["prefill"] and per_stage["decode"]
    assert per_stage["prefill"].isdisjoint(per_stage["decode"])
    assert per_stage["prefill"] | per_stage["decode"] == set(range(12))
    assert status["ranks"][0]["stage_iterations"] == {s: len(v) for s, v in per_stage.items()}


def assert_events_inside_iterations(trace: dict) -> None:
    """Every timed event of the worker process lies inside one of the file's iterations, but the
    profiler's own pauses, which follow the iteration they belong with."""
    iterations = [(e["ts"], e["ts"] + e["dur"], e["pid"]) for e in trace["traceEvents"]
                  if str(e.get("name", "")).startswith("rlprof::iteration") and e.get("ph") == "X"]
    pid = iterations[0][2]
    for e in trace["traceEvents"]:
        if e.get("ph") == "M" or "ts" not in e or e.get("pid") != pid:
            continue
        if e.get("name") == "rlprof::profiler pause":
            assert any(end <= e["ts"] + 1 for _, end, _ in iterations), e
            continue
        assert any(start <= e["ts"] <= end for start, end, _ in iterations), e


def test_manifest_and_status_by_global_step(server_tp1):
    for step in (50, 51):
        assert server_tp1.post("/start_profile", {"global_step": step, "step_start": 0, "step_end": 3}).status_code == 200
        server_tp1.complete()
        assert server_tp1.wait_state()["state"] == "done"
    older = server_tp1.get("/profile_status?global_step=50").json()
    assert older["global_step"] == 50 and older["state"] == "done"
    assert "frontend" not in older  # the API-server recorder belongs to step 51 now
    newest = server_tp1.get("/profile_status?global_step=51").json()
    assert newest["frontend"]["state"] == "done" and newest["session_id"] != older["session_id"]
    assert server_tp1.get("/profile_status?global_step=999").json()["state"] == "idle"
    assert server_tp1.get("/profile_status?global_step=x").status_code == 400
    folder = server_tp1.trace_dir / "global_step_50"
    m = json.loads((folder / "manifest.json").read_text())
    assert (m["engine"], m["global_step"], m["state"], m["expected_ranks"]) == ("vllm", 50, "done", 1)
    assert m["engine_version"].startswith("0.32.0") and m["plugin_version"]
    assert m["window"] == {"step_start": 0, "step_end": 3}
    assert m["writers"]["rank0"]["iterations_recorded"] == 3
    assert m["writers"]["frontend"]["state"] == "done"
    on_disk = {str(p.relative_to(folder)) for p in folder.rglob("*")
               if p.is_file() and not p.name.startswith(".") and p.name != "manifest.json"}
    assert {f["path"] for f in m["files"]} == on_disk
    # the worker traces alone in ranks/ (what per-rank tools open), the API server's in frontend/
    assert {f["path"].split("/")[0] for f in m["files"]} == {"ranks", "frontend"}
    for f in m["files"]:
        assert f["bytes"] == (folder / f["path"]).stat().st_size
    assert {(f["role"], f["rank"]) for f in m["files"]} == {("worker", "rank0"), ("frontend", "frontend")}


def test_failed_export_is_reported_and_serving_goes_on(server_tp1):
    (server_tp1.trace_dir / "global_step_60").write_text("a file where the step folder should go")
    assert server_tp1.post("/start_profile", {"global_step": 60, "step_start": 0, "step_end": 2}).status_code == 200
    server_tp1.complete()
    status = server_tp1.wait_state()
    assert status["state"] == "failed"
    assert any("FileExistsError" in e for e in status["errors"])
    server_tp1.complete()  # still serving
    assert server_tp1.post("/start_profile", {"global_step": 61, "step_end": 1, "step_start": 0}).status_code == 200
    server_tp1.complete()
    assert server_tp1.wait_state()["state"] == "done"


def test_chunked_session_records_what_a_plain_one_records(server_tp1):
    """chunk_iterations: torch's stop paid per chunk on the worker; the same
    operators in every iteration, the same stacks, one checked trace."""
    check_chunked_matches_plain(server_tp1, {"profiler_kwargs": {"with_stack": True}},
                                lambda folder: only(rank_traces(folder)))


def test_a_long_chunked_session_is_faithful(server_tp1):
    """Stacks on, 30 iterations in chunks of 8: each of the profiler's stops is
    marked in the trace, HolisticTraceAnalysis finds the iterations, the trace checks."""
    check_long_session_is_faithful(server_tp1, {"profiler_kwargs": {"with_stack": True}}, lambda folder: only(rank_traces(folder)))


@pytest.mark.extended  # CI's 25 minutes: the idle hook's bursts in tests/unit/test_idle_chunks.py (docs/testing.md)
def test_bursts_with_idle_gaps_record_no_idle_engine(server_tp1):
    """Stacks on, rlprof's default chunks over bursts 0.5 s apart, stopped mid-burst: the worker
    stays under 4 GB, each chunk ended at a wait or the stop, no pause as long as the one torch session's
    stop, no more recorded than that session (which also records the worker's idle spinning); stacks off too."""
    from tests.helpers.bursty import check_bursty_session

    numbers = check_bursty_session(server_tp1, ("VLLM::Worker",), {"profiler_kwargs": {"with_stack": True}}, 120,
                                   without_stacks=True)
    print("bursty vLLM:", json.dumps(numbers))


@pytest.mark.extended  # CI runs SGLang's (tests/e2e/test_sglang_server_tp1.py): the same check, the same helper
def test_ten_steps_in_a_row_under_streams_leave_the_server_as_it_was(server_tp1):
    """The soak's short variant (the hundred-step one: ``tests/e2e/test_soak.py``): ten sampled-stacks steps back
    to back under streaming traffic, every one ``done``, every request answered, the process tree within 64 MB of
    after the first step, no crash and no ``EINTR`` from a wait the sampler's signal interrupted in the log."""
    from tests.helpers.soak import check_short

    check_short(server_tp1, "vllm")


def test_a_rollout_steps_long_tail_is_the_time_its_longest_request_ran_alone(server_tp1):
    """Every prompt at once, one response ten times longer: the step's tail in the step log is the time that
    response ran alone, as the client saw it, and the report and ``/metrics`` name that response as the one
    that held the step (tests/helpers/rollout_tail.py)."""
    from tests.helpers.rollout_tail import check_tail

    check_tail(server_tp1, 38, metrics=True)


def test_the_flight_recorder_writes_what_went_wrong_and_nothing_else(server_tp1, tmp_path):
    """Last in the module: the flight recorder ran with the defaults through all of the above with no dump; then a
    stopped engine, a requested dump and a slow step, each written and reported (tests/helpers/flight.py)."""
    from tests.helpers.flight import check_live

    check_live(server_tp1, ("VLLM::Worker",), tmp_path)
