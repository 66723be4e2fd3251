"""verl 0.9.1's rollout profiling writes global-step folders, with no change to verl.

Both engines side by side, each in its own environment with verl's released
source (``site``): ``replica_replay`` starts a one-node Ray cluster (one CPU), one server
actor (verl's class; a stand-in start-up, see ``vllm_actor``/``sglang_actor``)
and drives it through verl's own ``RolloutReplica.start_profile()`` and
``stop_profile()``: before any weight sync, after a sync to weights version
4, and with a caller's ``global_step=9``.

- vLLM: rlprof's keys reach the actor through Ray's ``runtime_env``
  (``RLPROF_PROFILER_CONFIG`` with ``by_stage``), the documented line.
- SGLang: with verl's ``relocate_results`` on, verl moves each step folder
  whole into ``save_path`` right after the stop; its manifest still holds.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.helpers.loopback import Connections, ss_available
from tests.helpers.scripts import script_result
from tests.helpers.traces import iteration_indices, load_trace
from tests.helpers.vllm_server import TINY_MODEL
from tests.verl import site

# `make test-extended` (CI's 25 minutes: docs/testing.md): in CI, verl's calls run on both engines in
# tests/clients/test_verl_vllm.py and test_verl_sglang.py, verl's modules in test_verl_contract.py
pytestmark = [pytest.mark.vllm, pytest.mark.extended,
              pytest.mark.skipif(not site.installed(), reason="make env builds .cache/verl-0.9.1")]

REPLICA = "agent_loop_rollout_replica_0"  # verl's rollout_trace_dir(config, replica_rank=0)


def replay(engine: str, save_path: Path, *args: str, **env: str) -> dict:
    return script_result([str(site.PYTHON[engine]), "-m", "tests.verl.replica_replay", engine, str(TINY_MODEL),
                          str(save_path), *args], env=site.environment(engine, **env), cwd=site.REPO, timeout=600)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("verl")
    # every TCP connection of the replays' processes (Ray's, the engines') while they run
    with Connections(os.getpid()) as seen, ThreadPoolExecutor(max_workers=2) as pool:
        vllm = pool.submit(replay, "vllm", root / "vllm",
                           RLPROF_PROFILER_CONFIG=json.dumps({"by_stage": True}))
        sglang = pool.submit(replay, "sglang", root / "sglang", "--relocate")
        return {"vllm": (root / "vllm", vllm.result()), "sglang": (root / "sglang", sglang.result()),
                "connections": seen}


@pytest.mark.skipif(not ss_available(), reason="needs ss (iproute2)")
def test_ray_and_the_engines_stay_on_the_loopback(runs):
    seen = runs["connections"]
    assert any("127.0.0.2" in line for line in seen.lines), "ss saw no Ray connection: the check checked nothing"
    assert not seen.elsewhere, f"connections off the loopback: {seen.elsewhere}"


def step_folder(save_path: Path, new: list[str], step: int) -> Path:
    """The one step folder a session wrote (verl may have moved it: ``relocate_results``)."""
    folders = {Path(f).parts[0] if not f.startswith(REPLICA) else "/".join(Path(f).parts[:2])
               for f in new if "global_step_" in f}
    assert len(folders) == 1, new
    folder = folders.pop()
    assert folder.endswith(f"global_step_{step}"), new
    return save_path / folder


def check_step(folder: Path, step: int, engine: str, stages: set[str]) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    assert (manifest["state"], manifest["global_step"], manifest["engine"]) == ("done", step, engine)
    traces = [f for f in manifest["files"] if f["kind"] == "trace"]
    assert {f["stage"] for f in traces} == stages, traces
    for f in traces:
        assert iteration_indices(load_trace(folder / f["path"])), f  # real engine steps were recorded


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_steps_from_verl_weights_version(runs, engine):
    save_path, result = runs[engine]
    assert result["patched_in_driver"]
    sessions = result["sessions"]
    assert all(s["tokens"] == 6 for s in sessions.values()), sessions
    stages = {"prefill", "decode"} if engine == "vllm" else {"all"}  # vLLM's by_stage came through runtime_env
    # after a weight sync to version 4: step 5's rollout (verl syncs after each step)
    check_step(step_folder(save_path, sessions["after_sync_4"]["new"], 5), 5, engine, stages)
    # the caller's own global_step wins (verl forwards it to vLLM; it drops it on SGLang: rlprof takes it)
    check_step(step_folder(save_path, sessions["caller_step_9"]["new"], 9), 9, engine, stages)
    # no weights version yet: the default folder, as without the integration
    before = sessions["before_sync"]["new"]
    assert before and not any("global_step_" in f for f in before), before
    every = [f for s in sessions.values() for f in s["new"]]
    assert {p for f in every for p in Path(f).parts if "global_step_" in p} == (
        {"global_step_5", "global_step_9"} if engine == "vllm"
        else {"rollout-replica0_global_step_5", "rollout-replica0_global_step_9"})


def test_relocate_results_moves_whole_step_folders(runs):
    """verl's relocate_rollout_traces moves each entry of the replica folder up into save_path
    with a ``rollout-replica0_`` prefix: a step folder moves whole, its manifest with it."""
    save_path, result = runs["sglang"]
    for name in ("after_sync_4", "caller_step_9"):
        new = result["sessions"][name]["new"]
        assert all(f.startswith("rollout-replica0_") for f in new), new
    assert not list((save_path / REPLICA).iterdir())  # nothing left behind


@pytest.fixture(scope="module")
def unprofiled(tmp_path_factory):
    """verl's steps with no profile at all: sync, roll out, repeated (``replica_replay --no-profile``).
    vLLM's profiler config is verl's own (``build_vllm_profiler_args``: the replica's folder); SGLang's
    server takes none from verl, so its directory comes through Ray's ``runtime_env``, the documented line."""
    root = tmp_path_factory.mktemp("verl-unprofiled")
    with ThreadPoolExecutor(max_workers=2) as pool:
        vllm = pool.submit(replay, "vllm", root / "vllm", "--no-profile")
        sglang = pool.submit(replay, "sglang", root / "sglang", "--no-profile", RLPROF_PROFILER_CONFIG=json.dumps(
            {"torch_profiler_dir": str(root / "sglang" / "steps-root")}))
        return {"vllm": vllm.result(), "sglang": sglang.result()}


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_every_synced_step_is_measured_with_no_profile(unprofiled, engine):
    """verl calls set_global_steps after each weight sync and no profiling method: every rollout's numbers
    land under its own step (weights version + trainer_step_offset 1), none under no step; the calls verl makes
    of the server between rollouts are that step's RL phases, after its generation."""
    from tests.verl.replica_replay import SYNCED_VERSIONS

    result = unprofiled[engine]
    assert result["patched_in_driver"]
    assert all(t == 6 for t in result["tokens"].values()), result["tokens"]
    lines = result["step_lines"]
    by_step = {line["global_step"]: line for line in lines}
    assert sorted(by_step) == [v + 1 for v in SYNCED_VERSIONS], lines  # one line a step, no "null" step
    for version in SYNCED_VERSIONS:
        line = by_step[version + 1]
        assert line["step_source"] == "verl weights version", line
        assert line["iterations"] >= 6, line  # a prefill and the decodes of two 6-token requests at least
        assert line["busy_ms"] > 0, line
        expected = {"vllm": [("weight_update", "collective_rpc:reload_weights"), ("cache_reset", "reset_prefix_cache")],
                    # verl pauses SGLang with mode "abort", which the tokenizer manager carries out by aborting the
                    # requests itself: no scheduler pauses, so no rank has a pause phase
                    "sglang": [("cache_reset", "flush_cache"), ("resume", "continue_generation")]}[engine]
        assert [(p["phase"], p["call"]) for p in line.get("phases", [])] == expected, line
        assert all(p["started_at"] >= line["last_iteration_at"] for p in line["phases"]), line


@pytest.fixture(scope="module")
def two_replicas(tmp_path_factory):
    """Two replicas with verl's defaults (``all_ranks=False``: verl traces replica 0 alone), nothing added to
    verl's config or the environment: ``replica_replay --two-replicas`` on each engine."""
    root = tmp_path_factory.mktemp("verl-two-replicas")
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = {engine: pool.submit(replay, engine, root / engine, "--two-replicas") for engine in ("vllm", "sglang")}
        return {engine: (root / engine, run.result()) for engine, run in runs.items()}


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_every_replica_is_measured_and_only_the_profiled_one_traced(two_replicas, engine, tmp_path):
    """verl hands the engine a profiler directory only on the replica it traces (vLLM), or none at all (SGLang):
    both replicas still write their step logs under verl's save_path, in verl's replica folders, and the report
    reads both replicas' steps with their numbers; replica 1 has no trace."""
    from rlprof_plugins.cli.command import main as rlprof
    from tests.verl.replica_replay import SYNCED_VERSIONS

    save_path, result = two_replicas[engine]
    assert result["patched_in_driver"]
    replicas = ("agent_loop_rollout_replica_0", "agent_loop_rollout_replica_1")
    for replica in replicas:
        steps = sorted(line["global_step"] for line in result["step_lines"] if f"/{replica}/steps/" in line["_log"])
        assert steps == [v + 1 for v in SYNCED_VERSIONS], (replica, steps)
    for replica in replicas:  # the requests that held each step, followed on both
        assert any(f.startswith(f"{replica}/steps/requests/frontend-") for f in result["files"]), result["files"]
    traced = {f.split("/")[0] for f in result["files"] if ".pt.trace.json" in f or ".trace.json" in f}
    assert traced == {replicas[0]}, result["files"]
    profiled_step = SYNCED_VERSIONS[1] + 1
    out = tmp_path / "fleet.json"
    assert rlprof(["report", str(save_path), "-q", "--no-cache", "--json", str(out), "-o", str(tmp_path / "r.html")]) == 0
    data = json.loads(out.read_text())
    assert sorted(data["replicas"]) == list(replicas)
    by_step = {s["global_step"]: s for s in data["steps"]}
    for version in SYNCED_VERSIONS:
        rows = {r["name"]: r for r in by_step[version + 1]["replicas"]}
        assert sorted(rows) == list(replicas), (version, rows)
        assert all(r["iterations"] and r["iterations"] >= 6 for r in rows.values()), rows
    rows = {r["name"]: r for r in by_step[profiled_step]["replicas"]}
    assert rows[replicas[0]]["traced"] and not rows[replicas[1]]["traced"], rows
