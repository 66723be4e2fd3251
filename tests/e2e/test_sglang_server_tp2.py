"""The real SGLang 0.5.23 server at TP=2: every rank in one status, merge with a prefix.

Configured through ``RLPROF_PROFILER_CONFIG`` (the documented fallback for
launches that cannot take ``--profiler-config``), and loaded the way SGLang
releases without plugin entry points (< 0.5.12) load it: ``SGLANG_PLUGINS``
leaves rlprof out of SGLang's own plugin loading, ``RLPROF_SGLANG_AUTOLOAD=1``
loads it from ``rlprof_plugins.pth`` in the launcher and both spawned
schedulers. Configured with
``step_source: weight_version`` and slime's offset (-1). Native SGLang 0.5.23 with
``merge_profiles`` and a ``profile_prefix`` logs "Merge failed: No trace
files found" and writes nothing; with the plugin the merged trace is there.
"""

import json

import pytest

from rlprof_plugins.cli.command import main as rlprof
from rlprof_plugins.trace.format.check import check as check_file
from tests.helpers.browser import cells_match_json, open_page
from tests.helpers.traces import iteration_indices, load_trace, manifest_traces, merged_file
from tests.helpers.vllm_server import TINY_MODEL


@pytest.fixture(scope="module")
def sglang_tp2(tmp_path_factory):
    from tests.helpers.sglang_server import start_server

    tmp = tmp_path_factory.mktemp("sglang-tp2")
    # slime's mapping (docs/trainer.md): its synchronous loop runs global step S on weight version S + 1
    config = {"torch_profiler_dir": str(tmp / "traces"), "torch_profiler_with_stack": False,
              "step_source": "weight_version", "trainer_step_offset": -1}
    server = start_server(tmp, None, tp=2, env={"RLPROF_PROFILER_CONFIG": json.dumps(config),
                                                "SGLANG_PLUGINS": "not-rlprof", "RLPROF_SGLANG_AUTOLOAD": "1"},
                          sleep_on_idle=False)  # SGLang's default idle loop: the bursty test is about it
    server.trace_dir = tmp / "traces"
    yield server
    server.stop()


def merged_iterations(path) -> dict[str, list[int]]:
    """Iteration ranges of a merged trace, by the rank its process is named after."""
    trace = load_trace(path)
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    out: dict[str, list[int]] = {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and str(e.get("name", "")).startswith("rlprof::iteration "):
            rank = names[e["pid"]].split()[0]
            out.setdefault(rank, []).append(int(e["name"].split()[1]))
    return {rank: sorted(v) for rank, v in sorted(out.items())}


def test_merge_profiles_with_a_prefix_writes_one_merged_trace_of_both_ranks(sglang_tp2):
    body = {"global_step": 1, "merge_profiles": True, "profile_prefix": "rollout", "num_steps": 4}
    r = sglang_tp2.post("/start_profile", body)
    assert r.status_code == 200, r.text
    assert [rank["worker"] for rank in r.json()["ranks"]] == ["rollout-TP-0", "rollout-TP-1"]
    sglang_tp2.complete(max_tokens=8)
    status = sglang_tp2.wait_state()
    assert status["state"] == "done", status
    assert status["merge"]["state"] == "done" and len(status["merge"]["files"]) == 1
    folder = sglang_tp2.trace_dir / "global_step_1"
    ranks = manifest_traces(folder)
    assert list(ranks) == ["TP-0", "TP-1"]
    for path in ranks.values():
        assert path.name.startswith("rollout-TP-")
        assert iteration_indices(load_trace(path)) == [0, 1, 2, 3]
    merged = merged_file(folder)
    assert str(merged) in status["merge"]["files"]
    report = check_file(merged)
    assert report.ok, report.errors
    assert merged_iterations(merged) == {"TP-0": [0, 1, 2, 3], "TP-1": [0, 1, 2, 3]}


def test_by_stage_merge_gives_one_merged_trace_per_stage(sglang_tp2):
    body = {"global_step": 2, "merge_profiles": True, "profile_by_stage": True, "num_steps": 8}
    assert sglang_tp2.post("/start_profile", body).status_code == 200
    sglang_tp2.complete(max_tokens=8)
    assert sglang_tp2.wait_state()["state"] == "done"
    folder = sglang_tp2.trace_dir / "global_step_2"
    prefill = merged_file(folder, "prefill")
    decode = merged_file(folder, "decode")
    assert check_file(prefill).ok and check_file(decode).ok
    assert merged_iterations(prefill) == {"TP-0": [0], "TP-1": [0]}
    assert merged_iterations(decode) == {"TP-0": list(range(1, 8)), "TP-1": list(range(1, 8))}


def test_stop_reaches_every_rank_and_answers_before_the_profilers_stop(sglang_tp2):
    assert sglang_tp2.post("/start_profile", {"global_step": 3}).status_code == 200
    sglang_tp2.complete(max_tokens=4)
    # the chunk's stop so far: when each scheduler went idle after the request (waited for:
    # each rank parks after the answer, and a status read before that races it)
    parked = sglang_tp2.wait_parked()
    assert all(rank["parked"] for rank in parked["ranks"]), parked
    before = [rank["stop_seconds"] for rank in parked["ranks"]]
    stop = sglang_tp2.post("/stop_profile", {"wait": False})
    assert stop.status_code == 200, stop.text
    assert [rank["stop_seconds"] for rank in stop.json()["ranks"]] == before  # answered first
    done = sglang_tp2.wait_state()
    assert done["state"] == "done" and all(rank["stop_seconds"] is not None for rank in done["ranks"])
    traces = manifest_traces(sglang_tp2.trace_dir / "global_step_3")
    assert [iteration_indices(load_trace(p)) for p in traces.values()] == [[0, 1, 2, 3]] * 2


def test_the_plugin_was_loaded_by_the_opt_in_loader_not_the_entry_point(sglang_tp2):
    # SGLANG_PLUGINS=not-rlprof makes SGLang skip rlprof's entry point (asserted on
    # SGLang's own loader in tests/sglang); both ranks still run rlprof sessions.
    r = sglang_tp2.post("/start_profile", {"global_step": 9, "num_steps": 1})
    assert r.status_code == 200, r.text
    assert [rank["worker"] for rank in r.json()["ranks"]] == ["TP-0", "TP-1"]
    sglang_tp2.complete(max_tokens=2)
    assert sglang_tp2.wait_state()["state"] == "done"
    assert list(manifest_traces(sglang_tp2.trace_dir / "global_step_9")) == ["TP-0", "TP-1"]


def test_the_step_report_of_the_live_sglang_root_in_a_real_browser(sglang_tp2, tmp_path):
    """One more step recorded on the live TP=2 server: ``rlprof report`` reads every step the
    tests left (merged, by stage) with SGLang's rank names, and Chromium shows them."""
    assert sglang_tp2.post("/start_profile", {"global_step": 10, "num_steps": 4}).status_code == 200
    sglang_tp2.complete(max_tokens=8)
    assert sglang_tp2.wait_state()["state"] == "done"
    out = tmp_path / "report.json"
    assert rlprof(["report", str(sglang_tp2.trace_dir), "-o", str(tmp_path / "report.html"), "--json", str(out),
                   "--quiet"]) == 0
    data = json.loads(out.read_text())
    found = sorted(int(p.name.split("_")[-1]) for p in sglang_tp2.trace_dir.glob("global_step_*"))
    assert [s["global_step"] for s in data["steps"]] == found and not data["notes"]
    row = data["steps"][-1]
    assert (row["global_step"], row["engine"], row["ranks"], row["iterations"]) == (10, "sglang", ["TP-0", "TP-1"], 4)
    assert set(row["rank_time"]) == {"TP-0", "TP-1"}
    page = open_page(tmp_path / "report.html", tmp_path / "shot.png")
    assert not page.console_errors and not page.blocked and page.details == [f"step-{n}" for n in found]
    assert {c["rank"] for c in page.cells if c["step"] == 10 and c["rank"]} == {"TP-0", "TP-1"}
    assert cells_match_json(page, data) >= len(found) * 12 and page.distinct_colours() > 8


def start_at_version(server, set_version) -> dict:
    """Set the weight version as a trainer does, start with no global_step, record 2 iterations."""
    set_version()
    start = server.post("/start_profile", {"num_steps": 2})
    assert start.status_code == 200, start.text
    server.complete(max_tokens=4)
    status = server.wait_state()
    assert status["state"] == "done", status
    return {"start": start.json(), "status": status}


def test_the_global_step_is_the_weight_version_the_trainer_set(sglang_tp2):
    """slime's weight sync (update_weights_from_disk with weight_version, as its disk mode sends)
    and miles' (POST /update_weight_version): a start without global_step records into
    global_step_<version - 1>; the request's own step wins; a version that is no integer
    records where SGLang would, and the answer says why."""
    def from_disk():
        r = sglang_tp2.post("/update_weights_from_disk", {"model_path": str(TINY_MODEL), "weight_version": "7"})
        assert r.status_code == 200 and r.json()["success"], r.text

    def new_version(version):
        def send():
            r = sglang_tp2.post("/update_weight_version", {"new_version": version, "abort_all_requests": False})
            assert r.status_code == 200, r.text
        return send

    slime = start_at_version(sglang_tp2, from_disk)
    assert sglang_tp2.get("/model_info").json()["weight_version"] == "7"
    assert slime["start"]["global_step"] == 6 and "warnings" not in slime["start"]
    assert slime["status"]["step_source"] == "weight_version 7 + offset -1"
    folder = sglang_tp2.trace_dir / "global_step_6"
    assert json.loads((folder / "manifest.json").read_text())["step_source"] == "weight_version 7 + offset -1"
    assert [iteration_indices(load_trace(p)) for p in manifest_traces(folder).values()] == [[0, 1]] * 2

    miles = start_at_version(sglang_tp2, new_version("12"))
    assert (miles["start"]["global_step"], miles["status"]["step_source"]) == (11, "weight_version 12 + offset -1")
    assert sorted(manifest_traces(sglang_tp2.trace_dir / "global_step_11")) == ["TP-0", "TP-1"]

    own = sglang_tp2.post("/start_profile", {"global_step": 30, "num_steps": 1})
    assert own.json()["global_step"] == 30 and own.json()["step_source"] == "request"
    sglang_tp2.complete(max_tokens=2)
    assert sglang_tp2.wait_state()["state"] == "done"

    before = {p.name for p in sglang_tp2.trace_dir.iterdir()}
    hashed = start_at_version(sglang_tp2, new_version("rollout-a1b2"))
    assert hashed["start"]["global_step"] is None and hashed["status"]["step_source"] is None
    (warning,) = hashed["start"]["warnings"]
    assert "'rollout-a1b2' is not an integer" in warning
    new = {p.name for p in sglang_tp2.trace_dir.iterdir()} - before
    assert new and not any(name.startswith("global_step_") for name in new), new  # the default folder: the root


# `make test-extended` (CI's 25 minutes: docs/testing.md): in CI, the idle hook per rank parking each chunk
# between bursts (tests/unit/test_idle_chunks.py)
@pytest.mark.extended
def test_bursts_with_idle_gaps_end_each_ranks_chunks_when_it_waits(sglang_tp2):
    """Stacks on, rlprof's default over bursts with idle gaps: each scheduler ends its chunk when it
    goes idle, and no rank ends a chunk inside a burst (``bursty.within_budget``)."""
    from tests.helpers.bursty import check_bursty_ranks

    print("bursty SGLang TP=2, longest pause ms:", json.dumps(check_bursty_ranks(sglang_tp2, 60, {"with_stack": True})))
