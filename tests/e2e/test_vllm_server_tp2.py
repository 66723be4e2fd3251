"""TP=2: every rank writes its trace into each step's folder, step after step."""

import json

import pytest

from rlprof_plugins.cli.command import main as rlprof
from tests.helpers.browser import cells_match_json, open_page
from tests.helpers.hta import hta, hta_ranks
from tests.helpers.traces import iteration_details, iteration_indices, load_trace, merged_file, rank_folder, rank_traces
from tests.unit.test_report_truth import agreeing


def test_every_rank_every_step_with_window(server_tp2):
    for step in (0, 1, 2):
        r = server_tp2.post("/start_profile", {"global_step": step, "step_start": 1, "step_end": 4})
        assert r.status_code == 200, r.text
        server_tp2.complete(max_tokens=8)
        status = server_tp2.wait_state()
        assert status["state"] == "done" and len(status["ranks"]) == 2
    for step in (0, 1, 2):
        traces = rank_traces(server_tp2.trace_dir / f"global_step_{step}")
        assert sorted(traces) == ["rank0", "rank1"]
        for rank, path in traces.items():
            assert iteration_indices(load_trace(path)) == [1, 2, 3], (step, rank)


def test_sampled_python_stacks_on_both_ranks_while_they_all_reduce(server_tp2):
    """The signal timer on each worker's thread while the ranks exchange tensors (issue 57): serving goes
    on, both ranks' traces hold their own sampled frames and no torch Python events. Each rank's 11 decode
    iterations (all-reducing across two processes on two cores: 11.8-265 ms here, quiet or beside a CPU-bound
    neighbour, 2026-11-27) outlast the sampler's longest wait at 1,000 Hz (1.5 ms) by eight times at the
    shortest, so each rank's decode stage must be sampled (``stages_a_sample_must_reach``)."""
    from tests.helpers.spin_shares import assert_sampled_on_engine_thread

    body = {"global_step": 59, "step_start": 0, "step_end": 12, "python_stacks": "sampled", "sample_hz": 1000}
    assert server_tp2.post("/start_profile", body).status_code == 200
    server_tp2.complete(max_tokens=12)
    assert server_tp2.wait_state()["state"] == "done"
    traces = rank_traces(server_tp2.trace_dir / "global_step_59")
    for rank in ("rank0", "rank1"):
        python, must = assert_sampled_on_engine_thread(traces[rank], ("execute_model", "worker_busy_loop"))
        assert "decode" in must and "decode" in python


def test_stop_driven_session_on_both_ranks(server_tp2):
    assert server_tp2.post("/start_profile", {"global_step": 5}).status_code == 200
    server_tp2.complete(max_tokens=8)
    # the chunks' stops so far: at the idle start and when the engine went idle after the request (waited for:
    # each rank parks after the answer, and a status read before that races it)
    parked = server_tp2.wait_parked()
    assert all(rank["parked"] for rank in parked["ranks"]), parked
    before = [rank["stop_seconds"] for rank in parked["ranks"]]
    r = server_tp2.post("/stop_profile", {"wait": False})
    assert r.status_code == 200 and r.json()["status"] == "stopped"
    # answered before either rank's profiler stopped again (each stops on its own worker thread)
    assert [rank["stop_seconds"] for rank in r.json()["ranks"]] == before
    done = server_tp2.wait_state()
    assert done["state"] == "done" and all(rank["stop_seconds"] is not None for rank in done["ranks"])
    traces = rank_traces(server_tp2.trace_dir / "global_step_5")
    counts = {rank: iteration_indices(load_trace(p)) for rank, p in traces.items()}
    assert counts["rank0"] == counts["rank1"] == list(range(8))
    nothing = server_tp2.post("/stop_profile")  # nothing running: ignored, as vLLM's own route ignores it
    assert nothing.status_code == 200 and nothing.json()["status"] == "ignored", nothing.text


def test_by_stage_on_both_ranks_and_one_manifest(server_tp2):
    r = server_tp2.post("/start_profile", {"global_step": 8, "step_start": 0, "step_end": 6, "by_stage": True})
    assert r.status_code == 200
    server_tp2.complete(max_tokens=8)
    assert server_tp2.wait_state()["state"] == "done"
    folder = server_tp2.trace_dir / "global_step_8"
    seen = {}
    for rank in ("rank0", "rank1"):
        stages = {}
        for stage in ("prefill", "decode"):
            (path,) = rank_folder(folder, stage).glob(f"{rank}.*.{stage}.pt.trace.json.gz")
            stages[stage] = sorted(iteration_details(load_trace(path)))
        # one request: the first iteration is its prompt, the rest decode
        assert stages == {"prefill": [0], "decode": [1, 2, 3, 4, 5]}, (rank, stages)
        seen[rank] = stages
    m = json.loads((folder / "manifest.json").read_text())
    assert m["state"] == "done" and m["expected_ranks"] == 2
    worker_files = [f for f in m["files"] if f["role"] == "worker"]
    assert sorted((f["rank"], f["stage"]) for f in worker_files) == [
        ("rank0", "decode"), ("rank0", "prefill"), ("rank1", "decode"), ("rank1", "prefill")]


def test_merge_option_writes_one_checked_trace_per_step_and_stage(server_tp2):
    from rlprof_plugins.trace.format.check import check

    assert server_tp2.post("/start_profile", {"global_step": 12, "step_start": 0, "step_end": 4}).status_code == 200
    server_tp2.complete(max_tokens=8)
    status = server_tp2.wait_state()
    # the step is done only once its merged trace is written
    assert status["state"] == "done" and status["merge"]["state"] == "done", status
    folder = server_tp2.trace_dir / "global_step_12"
    merged = merged_file(folder)
    assert status["merge"]["files"] == [str(merged)]
    report = check(merged)
    assert report.ok, report.errors
    trace = load_trace(merged)
    ranks = trace["rlprof_merge"]["ranks"]
    assert [r["label"] for r in ranks] == ["rank0", "rank1", "frontend"]
    for r in ranks[:2]:
        mine = [e for e in trace["traceEvents"] if e.get("pid") in set(r["pids"])]
        assert iteration_indices({"traceEvents": mine}) == [0, 1, 2, 3], r["label"]
    m = json.loads((folder / "manifest.json").read_text())
    assert m["state"] == "done" and m["writers"]["merge"]["files"][0]["path"] == str(merged.relative_to(folder))

    # by stage: one merged trace per stage, each with both ranks' iterations of that stage
    body = {"global_step": 13, "step_start": 0, "step_end": 5, "by_stage": True}
    assert server_tp2.post("/start_profile", body).status_code == 200
    server_tp2.complete(max_tokens=8)
    assert server_tp2.wait_state()["merge"]["state"] == "done"
    folder = server_tp2.trace_dir / "global_step_13"
    for stage, expected in (("prefill", [0]), ("decode", [1, 2, 3, 4])):
        path = merged_file(folder, stage)
        assert check(path).ok
        trace = load_trace(path)
        for r in trace["rlprof_merge"]["ranks"]:
            mine = [e for e in trace["traceEvents"] if e.get("pid") in set(r["pids"])]
            assert sorted(iteration_details({"traceEvents": mine})) == expected, (stage, r["label"])


# `make test-extended` (CI's 25 minutes: docs/testing.md). HTA in CI: tests/unit/test_gpu_traces_published.py
# (its temporal breakdown on real GPU traces) and the 30-iteration stacks-on sessions of
# tests/e2e/test_*_server_tp1.py (tests/helpers/chunked.py: get_iterations)
@pytest.mark.extended
def test_holistic_trace_analysis_opens_a_steps_ranks_as_they_are(server_tp2):
    """A live TP=2 step with the API-server trace and ``merge: true``: the
    step's ``ranks/`` folder (per stage: ``prefill/``, ``decode/``) holds
    exactly the worker ranks, which HolisticTraceAnalysis loads as they are;
    the manifest, the API-server trace and the merged trace live apart."""
    for step, by_stage in ((14, False), (15, True)):
        body = {"global_step": step, "step_start": 0, "step_end": 4, "by_stage": by_stage}
        assert server_tp2.post("/start_profile", body).status_code == 200
        server_tp2.complete(max_tokens=8)
        status = server_tp2.wait_state()
        assert status["state"] == "done", status
    whole = server_tp2.trace_dir / "global_step_14"
    assert list((whole / "frontend").glob("*.async_llm.*")) and merged_file(whole).exists()
    assert hta_ranks(whole / "ranks") == [0, 1]
    # and finds the iterations (ProfilerStep#N inside rlprof::iteration N); it leaves out the last one
    found = hta(whole / "ranks", "iterations")
    assert found["iterations"] == [0, 1, 2] and all(found["events_per_iteration"][str(k)] > 0 for k in range(3))
    staged = server_tp2.trace_dir / "global_step_15"
    for stage in ("prefill", "decode"):
        assert merged_file(staged, stage).exists()
        assert hta_ranks(staged / stage) == [0, 1]
    assert hta(staged / "decode", "iterations")["iterations"] == [1, 2]


# `make test-extended` (CI's 25 minutes: docs/testing.md): in CI, the live SGLang TP=2 root's report opens in
# Chromium (tests/e2e/test_sglang_server_tp2.py), and the report's pages in tests/unit/test_report_command.py
@pytest.mark.extended
def test_the_step_report_of_a_live_root_in_a_real_browser(server_tp2, tmp_path, capsys):
    """A plain step (no merge), a by-stage one and a merged one from the live TP=2 server, with
    whatever steps the tests before left: ``rlprof report`` names every step, and the page
    (headless Chromium, network off) shows each step's stages and ranks as ``--json`` says."""
    bodies = {20: {"merge_profiles": False}, 21: {"by_stage": True}, 22: {}}
    for step, extra in bodies.items():
        body = {"global_step": step, "step_start": 0, "step_end": 4, **extra}
        assert server_tp2.post("/start_profile", body).status_code == 200
        server_tp2.complete(max_tokens=8)
        assert server_tp2.wait_state()["state"] == "done"
    root = server_tp2.trace_dir
    out = tmp_path / "report.json"
    assert rlprof(["report", str(root), "-o", str(tmp_path / "report.html"), "--json", str(out), "--quiet"]) == 0
    data = json.loads(out.read_text())
    steps = {s["global_step"]: s for s in data["steps"]}
    found = sorted(int(p.name.split("_")[-1]) for p in root.glob("global_step_*"))
    assert sorted(steps) == found and not data["notes"]
    for step in (20, 21, 22):
        row = steps[step]
        assert row["state"] == "done" and row["ranks"] == ["rank0", "rank1"] and row["iterations"] == 4, row
        assert set(row["rank_time"]) == {"rank0", "rank1"} and sum(row["slowest_rank_iterations"].values()) == 4
        assert row["operators"]["cpu"] and all(t["cpu_comm_ms"] > 0 for t in row["rank_time"].values())
    assert set(steps[21]["stages"]) == {"prefill", "decode"} and steps[21]["stages"]["prefill"]["iterations"] == 1
    roles = {step: sorted({f["role"] for f in steps[step]["files"]}) for step in (20, 22)}
    assert roles == {20: ["frontend", "worker"], 22: ["frontend", "merged", "worker"]}
    page = open_page(tmp_path / "report.html", tmp_path / "shot.png")
    assert not page.console_errors and not page.blocked
    assert page.details == [f"step-{n}" for n in found]
    assert {"prefill", "decode"} <= set(page.series) and page.distinct_colours() > 8
    assert {(c["step"], c["rank"]) for c in page.cells if c["rank"]} >= {(s, r) for s in (20, 21, 22)
                                                                       for r in ("rank0", "rank1")}
    assert cells_match_json(page, data) >= len(found) * 12
    # rlprof summary says the same of every step and stage (one definition: trace/analysis/step_numbers.py)
    capsys.readouterr()
    assert rlprof(["summary", str(root), "--json", "-q"]) == 0
    assert (21, "decode") in agreeing(json.loads(capsys.readouterr().out), data)


def test_a_start_without_a_step_records_at_the_engines_weight_version(server_tp2):
    """vLLM's own weight version, set through its route (a vLLM trainer's /finish_weight_update
    {"weight_version"} sets the same): the route reads it once per start with no global_step;
    version 30 + the default offset 1 is global_step_31, with both ranks and the source named."""
    r = server_tp2.post("/update_weight_version", {"new_version": "30"})
    assert r.status_code == 200, r.text
    assert server_tp2.get("/weight_info").json()["weight_version"] == "30"
    start = server_tp2.post("/start_profile", {"step_start": 0, "step_end": 3})
    assert start.status_code == 200 and start.json()["global_step"] == 31 and "warnings" not in start.json()
    server_tp2.complete(max_tokens=8)
    status = server_tp2.wait_state()
    assert status["state"] == "done" and status["step_source"] == "weight_version 30 + offset 1"
    folder = server_tp2.trace_dir / "global_step_31"
    assert json.loads((folder / "manifest.json").read_text())["step_source"] == "weight_version 30 + offset 1"
    traces = rank_traces(folder)
    assert sorted(traces) == ["rank0", "rank1"]
    assert all(iteration_indices(load_trace(p)) == [0, 1, 2] for p in traces.values())


def test_a_trainers_calls_between_generations_are_timed_into_each_ranks_step(server_tp2):
    """A weight reload through collective_rpc, a prefix-cache reset, a pause that keeps requests and a resume (vLLM's
    dev-mode and RL routes): each one phase of the step on both ranks, inside the window the caller saw
    (tests/helpers/rl_phases.py)."""
    from tests.helpers.rl_phases import check_phases

    phases = check_phases(server_tp2, 73, [
        ("/collective_rpc", {"method": "reload_weights"}), ("/reset_prefix_cache", {}),
        ("/pause?mode=keep", {}), ("/resume", {})],
        [("weight_update", "collective_rpc:reload_weights"), ("cache_reset", "reset_prefix_cache"),
         ("pause", "pause_scheduler"), ("resume", "resume_scheduler")], ranks=2)
    assert phases[2]["detail"] == "mode=keep"
