"""Contract tests for one vLLM release, against that release's own modules.

Run in a child interpreter by ``tests/compat/test_releases.py`` with the
release first on ``sys.path`` (``RLPROF_CONTRACT_VERSION`` names it) and
``RLPROF_DISABLE=1``, so the tests apply the patches themselves.

What runs for real: the release's classes and functions the patches wrap
or call (``EngineArgs`` and its parser, ``ProfilerConfig``, ``LLM``,
``EngineCore``, ``UniProcExecutor.collective_rpc``, ``Worker``,
``SchedulerOutput`` and ``compute_iteration_details``, the API server
module), torch.profiler and rlprof's sessions. What does not: a model. An
engine iteration is the patched ``Worker.execute_model`` wrapper around a
small torch computation instead of the release's model runner (older
releases' compiled ops do not load with this torch); the newest release is
also served end to end by tests/e2e.
"""

from __future__ import annotations

import importlib
import inspect
import json
import logging
import os

import pytest
import torch
from packaging.version import Version

from rlprof_plugins.cli import compatibility as compat
from rlprof_plugins.store.layout import session_dir
from rlprof_plugins.patches import VLLM_PATCHES
from rlprof_plugins.patches.vllm import config as vllm_profiler_config
from rlprof_plugins.patches.vllm import control as vllm_control
from rlprof_plugins.patches.vllm import worker as vllm_worker
from rlprof_plugins.patches.base import apply_guarded
from tests.compat.contract_common import (altered_module, applied_patches, check_doctor, check_patch_on_release,
                                         check_recorded_shapes, check_release_imported, marker, wait_done)
from rlprof_plugins.patches.vllm.facts import version as vllm_version
from tests.compat.vllm_wiring import llm_over, scheduler_output
from tests.helpers.traces import iteration_details, load_trace, manifest_traces, pause_events

RELEASE = os.environ["RLPROF_CONTRACT_VERSION"]
V = Version(RELEASE)
ENV_ERA = V < Version("0.13")


def test_the_release_under_test_is_the_one_imported():
    check_release_imported("vllm", vllm_version(), RELEASE)


@pytest.mark.parametrize("patch", VLLM_PATCHES, ids=lambda p: p.name)
def test_patch_applies_or_is_refused_with_one_warning(patch, caplog):
    check_patch_on_release(patch, vllm_version(), caplog)


def test_recorded_shapes_match_this_release():
    check_recorded_shapes(VLLM_PATCHES, "vllm", RELEASE)


def test_a_patch_whose_target_changed_is_off_and_the_rest_still_apply(caplog):
    """The worker module as an altered release would ship it: ``profile``
    renamed. Only the worker patch is off; the module is left as it was."""
    altered = altered_module("vllm.v1.worker.gpu_worker", "    def profile(", "    def profile_renamed(")
    before = dict(vars(altered.Worker))
    patch = vllm_worker.WORKER_PATCH
    patch.revert()
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        assert not apply_guarded(patch, altered, vllm_version())
    said = [r.getMessage() for r in caplog.records if patch.name in r.getMessage()]
    assert len(said) == 1 and patch.feature in said[0] and RELEASE in said[0] and "profile" in said[0]
    assert dict(vars(altered.Worker)) == before
    core = importlib.import_module("vllm.v1.engine.core")
    from rlprof_plugins.patches.vllm.engine_core import ENGINE_CORE_PATCH

    assert apply_guarded(ENGINE_CORE_PATCH, core, vllm_version())
    ENGINE_CORE_PATCH.revert()


def test_capabilities_in_the_table_hold_on_this_release():
    caps = {c.feature: c.available for c in compat.capabilities("vllm", RELEASE)}
    core_source = inspect.getsource(importlib.import_module("vllm.v1.engine.core"))
    assert caps["stop answered before the profiler stops"] == ("_idle_state_callbacks" in core_source)
    utils = importlib.import_module("vllm.v1.utils")
    assert caps["prefill/decode from vLLM's compute_iteration_details"] == hasattr(utils, "compute_iteration_details")
    dist = importlib.import_module("vllm.distributed.utils")
    assert caps["vLLM's rank names in trace files (dp0_pp0_tp0_..._rank0)"] == hasattr(dist, "get_worker_rank_suffix")
    assert caps["global-step folders from the engine's weight version (step_source)"] == (
        "def get_weight_version" in core_source)


# ---- options ------------------------------------------------------------------
@pytest.fixture
def patched():
    applied = applied_patches(VLLM_PATCHES, vllm_version())
    yield
    for patch in applied:
        patch.revert()


def _parser():
    from vllm.engine.arg_utils import EngineArgs

    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser
    return EngineArgs.add_cli_args(FlexibleArgumentParser())


def _vllm_env() -> dict:
    return {k: v for k, v in os.environ.items() if k.startswith("VLLM_")}


@pytest.mark.skipif(ENV_ERA, reason="vLLM < 0.13 has no --profiler-config")
def test_profiler_config_flag_takes_rlprof_keys(patched, tmp_path, capsys):
    from vllm.config import ProfilerConfig

    before = _vllm_env()
    parser = _parser()
    ns = parser.parse_args(["--profiler-config", json.dumps(
        {"profiler": "torch", "torch_profiler_dir": str(tmp_path), "step_start": 2, "step_end": 5, "by_stage": True})])
    assert isinstance(ns.profiler_config, ProfilerConfig)
    assert ns.profiler_config.torch_profiler_dir.endswith(tmp_path.name)
    options = vllm_profiler_config.options_of(ns.profiler_config)
    assert (options.step_start, options.step_end, options.by_stage) == (2, 5, True)
    with pytest.raises(SystemExit):
        parser.parse_args(["--profiler-config", json.dumps(
            {"profiler": "torch", "torch_profiler_dir": str(tmp_path), "step_strat": 2})])
    assert "step_strat" in capsys.readouterr().err
    assert _vllm_env() == before, "rlprof must not export VLLM_* variables"


@pytest.mark.skipif(ENV_ERA, reason="vLLM < 0.13: RLPROF_PROFILER_CONFIG is the whole configuration")
def test_rlprof_keys_from_the_environment_merge_over_the_flag(patched, tmp_path, monkeypatch, capsys):
    """A framework builds --profiler-config itself (verl); the user adds rlprof
    keys in RLPROF_PROFILER_CONFIG. vLLM's own keys there must agree."""
    flag = json.dumps({"profiler": "torch", "torch_profiler_dir": str(tmp_path), "step_start": 1})
    monkeypatch.setenv("RLPROF_PROFILER_CONFIG", json.dumps({"by_stage": True, "step_end": 5,
                                                             "torch_profiler_dir": str(tmp_path)}))
    options = vllm_profiler_config.options_of(_parser().parse_args(["--profiler-config", flag]).profiler_config)
    assert (options.step_start, options.step_end, options.by_stage) == (1, 5, True)
    for overlay, key in (({"step_start": 2}, "step_start"), ({"torch_profiler_dir": "/elsewhere"}, "torch_profiler_dir"),
                         ({"step_strat": 2}, "step_strat")):
        monkeypatch.setenv("RLPROF_PROFILER_CONFIG", json.dumps(overlay))
        with pytest.raises(SystemExit):
            _parser().parse_args(["--profiler-config", flag])
        assert key in capsys.readouterr().err
    # the dict path of in-process engines (verl's AsyncEngineArgs) merges the same way
    monkeypatch.setenv("RLPROF_PROFILER_CONFIG", json.dumps({"merge": True}))
    cfg = vllm_profiler_config.build_profiler_config({"profiler": "torch", "torch_profiler_dir": str(tmp_path)})
    assert vllm_profiler_config.options_of(cfg).merge


@pytest.mark.skipif(not ENV_ERA, reason="vLLM 0.13+ takes --profiler-config")
def test_env_era_config_is_validated_when_the_engine_config_is_built(patched, monkeypatch):
    from vllm.engine.arg_utils import EngineArgs

    assert "--profiler-config" not in _parser()._option_string_actions
    monkeypatch.setenv("RLPROF_PROFILER_CONFIG", json.dumps({"torch_profiler_dir": "/tmp/x", "step_strat": 2}))
    before = _vllm_env()
    args = object.__new__(EngineArgs)  # its __post_init__ would resolve a model; ours runs first anyway
    with pytest.raises(ValueError, match="step_strat"):
        args.create_engine_config()
    assert _vllm_env() == before


# ---- start/stop plumbing, window counting, file naming --------------------------
def _stack(tmp_path, monkeypatch, **ours):
    """LLM -> EngineCore -> UniProcExecutor -> Worker, the release's classes
    wired as LLM's in-process engine wires them (no model loaded)."""
    from vllm.config import ParallelConfig, VllmConfig
    from vllm.v1.worker.gpu_worker import Worker

    data = {"profiler": "torch", "torch_profiler_dir": str(tmp_path), "torch_profiler_with_stack": False, **ours}
    if ENV_ERA:
        monkeypatch.setenv("RLPROF_PROFILER_CONFIG", json.dumps(data))
        vllm_config = VllmConfig(parallel_config=ParallelConfig())
    else:
        vllm_config = VllmConfig(parallel_config=ParallelConfig(),
                                 profiler_config=vllm_profiler_config.build_profiler_config(data))
    worker = object.__new__(Worker)
    worker.rank, worker.vllm_config = 0, vllm_config
    if "self.profiler_config" in inspect.getsource(Worker.__init__):
        worker.profiler_config = vllm_config.profiler_config
    return llm_over(worker, vllm_config), worker


def _iterate(worker, schedule):
    """Engine iterations through the patched Worker.execute_model (and
    sample_tokens where the release defers sampling), a matmul standing in
    for the model."""
    from vllm.v1.worker.gpu_worker import Worker

    execute = vars(Worker)["execute_model"]
    assert marker(execute) == vllm_worker.WORKER_PATCH.name
    sample = vars(Worker).get("sample_tokens")
    x = torch.ones(64, 64)
    for i, (new, cached) in enumerate(schedule):
        deferred = sample is not None and i % 2 == 1  # exercise both paths

        def forward(scheduler_output, deferred=deferred):
            (x @ x).sum()
            return None if deferred else "output"

        execute._self_wrapper(forward, worker, (scheduler_output(new, cached),), {})
        if deferred:
            sample._self_wrapper(lambda grammar_output: "output", worker, (None,), {})


def test_global_step_window_stages_and_file_names(patched, tmp_path, monkeypatch):
    llm, worker = _stack(tmp_path, monkeypatch)
    answer = llm.start_profile(global_step=37, step_start=1, step_end=4, by_stage=True)
    assert answer["global_step"] == 37 and answer["state"] == "waiting", answer
    # 1 prefill (two prompts of 5 and 3 tokens), then decodes of both requests
    schedule = [({"a": 5, "b": 3}, {})] + [({}, {"a": 1, "b": 1})] * 5
    _iterate(worker, schedule)
    status = wait_done(llm.profile_status, 37)
    assert status["state"] == "done", status
    folder = session_dir(tmp_path, 37)
    assert folder.name == "global_step_37"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["engine"] == "vllm" and manifest["engine_version"] == vllm_version()
    traces = manifest_traces(folder, "decode")  # by_stage: one trace per stage
    assert list(traces) == ["rank0"]
    expected_name = vllm_control.rank_suffix(worker)
    if V < Version("0.17"):
        assert expected_name == "rank0"
    assert traces["rank0"].name.startswith(expected_name + ".")
    details = iteration_details(load_trace(traces["rank0"]))
    assert sorted(details) == [1, 2, 3]  # exactly the window, counted from the request
    assert {d[0] for d in details.values()} == {"decode"}
    assert iteration_details(load_trace(manifest_traces(folder, "prefill")["rank0"])) == {}


def test_prefill_counts_and_stop_driven_session(patched, tmp_path, monkeypatch):
    llm, worker = _stack(tmp_path, monkeypatch)
    llm.start_profile(global_step=5)
    _iterate(worker, [({"a": 5}, {}), ({}, {"a": 1}), ({"c": 4}, {"a": 1})])
    answer = llm.stop_profile()
    assert answer["state"] in ("exporting", "done"), answer
    assert wait_done(llm.profile_status, 5)["state"] == "done"
    details = iteration_details(load_trace(manifest_traces(session_dir(tmp_path, 5))["rank0"]))
    assert details[0] == ("prefill", 5, 0, 1)
    assert details[1] == ("decode", 0, 1, 1)
    assert details[2][:3] == ("prefill", 4, 1)  # a new prompt next to a decode: prefill, both counted
    # a second start in the same process works and writes its own step
    llm.start_profile(global_step=6, step_start=0, step_end=1)
    _iterate(worker, [({}, {"a": 1})])
    assert wait_done(llm.profile_status, 6)["state"] == "done"
    assert sorted(iteration_details(load_trace(manifest_traces(session_dir(tmp_path, 6))["rank0"]))) == [0]


def test_an_empty_step_ends_a_chunk_and_the_next_iteration_starts_one(patched, tmp_path, monkeypatch):
    """The engine's empty step (it clears finished requests before it idles) ends a chunked recording's
    running chunk; the next iteration starts the next one: every iteration recorded (issue 43)."""
    from vllm.v1.worker.gpu_worker import Worker

    llm, worker = _stack(tmp_path, monkeypatch)
    llm.start_profile(global_step=9)
    _iterate(worker, [({"a": 5}, {}), ({}, {"a": 1})])
    empty = vars(Worker)["execute_model"]._self_wrapper(lambda so: "empty", worker, (scheduler_output({}, {}),), {})
    assert empty == "empty"  # the engine's own result, untouched
    _iterate(worker, [({}, {"a": 1}), ({}, {"a": 1})])
    llm.stop_profile()
    assert wait_done(llm.profile_status, 9)["state"] == "done"
    trace = load_trace(manifest_traces(session_dir(tmp_path, 9))["rank0"])
    assert sorted(iteration_details(trace)) == [0, 1, 2, 3]
    causes = [p["args"]["cause"] for p in pause_events(trace)]
    assert causes == ["idle", "resume", "stop"], causes


def test_bad_requests_are_refused_naming_the_field(patched, tmp_path, monkeypatch):
    from rlprof_plugins.errors import RequestError

    llm, _ = _stack(tmp_path, monkeypatch)
    for kwargs, field in (({"global_step": -1}, "global_step"), ({"step_start": 3, "step_end": 2}, "step_end"),
                          ({"profile_prefix": "../x"}, "profile_prefix")):
        with pytest.raises(RequestError) as e:
            llm.start_profile(**kwargs)
        assert e.value.field == field
    # nothing written: beside the server's claim of its directory, made at start-up (store.servers)
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith(".rlprof-root")] == []


def test_http_routes_are_ours_when_configured(patched, tmp_path, monkeypatch):
    """The release's own API server app gets rlprof's three routes."""
    import argparse

    from fastapi import FastAPI
    from fastapi.routing import APIRoute

    data = {"profiler": "torch", "torch_profiler_dir": str(tmp_path)}
    if ENV_ERA:
        monkeypatch.setenv("RLPROF_PROFILER_CONFIG", json.dumps(data))
        api_server = importlib.import_module("vllm.entrypoints.openai.api_server")
        from vllm.entrypoints.openai.cli_args import make_arg_parser

        try:
            from vllm.utils.argparse_utils import FlexibleArgumentParser
        except ImportError:
            from vllm.utils import FlexibleArgumentParser
        app = api_server.build_app(make_arg_parser(FlexibleArgumentParser()).parse_args([]))
    else:
        router = importlib.import_module("vllm.entrypoints.serve.profile.api_router")
        app = FastAPI()
        app.state.args = argparse.Namespace(profiler_config=vllm_profiler_config.build_profiler_config(data),
                                            api_key=None)
        router.attach_router(app)
    routes = {r.path: r for r in app.router.routes if isinstance(r, APIRoute)}
    for path in ("/start_profile", "/stop_profile", "/profile_status"):
        # rlprof's route (declared in patches/profile_routes.py, bound to vLLM by the api_router patch)
        assert path in routes and routes[path].endpoint.__module__ == "rlprof_plugins.patches.profile_routes", path
    assert [r.path for r in app.router.routes if isinstance(r, APIRoute)].count("/start_profile") == 1


def test_doctor_reports_this_release():
    report = check_doctor("vllm", RELEASE)
    if ENV_ERA:
        assert "RLPROF_PROFILER_CONFIG" in report["configure"]


# ---- profiler_kwargs: per-session torch settings (vLLM 0.33's field; rlprof's on every release) ----
def _python_frames(folder) -> int:
    """Python-stack events (torch's with_stack) in the folder's one worker trace."""
    trace = load_trace(manifest_traces(folder)["rank0"]) if (folder / "manifest.json").exists() else load_trace(
        next(folder.glob("*rank0.*.pt.trace.json.gz")))
    return sum(1 for e in trace["traceEvents"] if e.get("cat") == "python_function")


def test_profiler_kwargs_set_one_sessions_torch_settings(patched, tmp_path, monkeypatch):
    """Stacks are off in the config; ``profiler_kwargs`` turns them on for one
    session only, through the release's own LLM -> EngineCore -> Worker chain."""
    from rlprof_plugins.errors import RequestError

    llm, worker = _stack(tmp_path, monkeypatch)
    llm.start_profile(global_step=8, step_start=1, step_end=3, profiler_kwargs={"with_stack": True})
    _iterate(worker, [({"a": 3}, {})] + [({}, {"a": 1})] * 3)
    assert wait_done(llm.profile_status, 8)["state"] == "done"
    llm.start_profile(global_step=9, step_start=1, step_end=3)
    _iterate(worker, [({"b": 3}, {})] + [({}, {"b": 1})] * 3)
    assert wait_done(llm.profile_status, 9)["state"] == "done"
    assert _python_frames(session_dir(tmp_path, 8)) > 0
    assert _python_frames(session_dir(tmp_path, 9)) == 0
    for bad, field in (({"schedule": None}, "profiler_kwargs.schedule"),
                       ({"with_stack": "yes"}, "profiler_kwargs.with_stack"), ([1], "profiler_kwargs")):
        with pytest.raises(RequestError) as e:
            llm.start_profile(global_step=10, profiler_kwargs=bad)
        assert e.value.field == field
    assert not session_dir(tmp_path, 10).exists()


def _engine_core(llm):
    return llm.llm_engine.engine_core.engine_core  # InprocClient's EngineCore, the release's class


@pytest.mark.skipif("max_iterations" not in inspect.signature(
    importlib.import_module("vllm.v1.engine.core").EngineCore.profile).parameters,
    reason="this release's EngineCore.profile takes no window (the Rust frontend's fields: vLLM 0.17+)")
def test_the_rust_frontends_call_runs_an_rlprof_session(patched, tmp_path, monkeypatch):
    """What vLLM's Rust frontend forwards to the engine (``profile`` with profile_prefix, delay_iterations,
    max_iterations; nothing else): a session in the step its prefix names (step_source profile_prefix),
    the configured by_stage, vLLM's window counted from the start; a stop returns once the files are written."""
    llm, worker = _stack(tmp_path, monkeypatch, step_source="profile_prefix", by_stage=True)
    core = _engine_core(llm)
    assert core.profile(True, "global_step_9", delay_iterations=1, max_iterations=2) is None
    _iterate(worker, [({"a": 3}, {})] + [({}, {"a": 1})] * 4)
    status = wait_done(llm.profile_status, 9)
    assert status["state"] == "done" and status["step_source"] == "profile_prefix global_step_9", status
    decode = manifest_traces(session_dir(tmp_path, 9), "decode")["rank0"]
    assert decode.name.startswith("global_step_9_") and sorted(iteration_details(load_trace(decode))) == [1, 2]
    core.profile(True, "global_step_10")  # until the stop
    _iterate(worker, [({}, {"a": 1})] * 2)
    core.profile(False)
    assert json.loads((session_dir(tmp_path, 10) / "manifest.json").read_text())["state"] == "done"
    from rlprof_plugins.errors import ConflictError

    with pytest.raises(ConflictError, match="no profiling session is running"):
        core.profile(False)


@pytest.mark.skipif(not hasattr(importlib.import_module("vllm.v1.engine.core").EngineCore, "get_weight_version"),
                    reason="this release's engine keeps no weight version")
def test_the_engines_own_profile_call_takes_its_step_from_the_weight_version(patched, tmp_path, monkeypatch):
    llm, worker = _stack(tmp_path, monkeypatch, step_source="weight_version", trainer_step_offset=-1)
    core = _engine_core(llm)
    core.set_weight_version("4")  # what /update_weight_version and /finish_weight_update set
    core.profile(True)
    _iterate(worker, [({"a": 3}, {}), ({}, {"a": 1})])
    core.profile(False)
    manifest = json.loads((session_dir(tmp_path, 3) / "manifest.json").read_text())
    assert manifest["state"] == "done" and manifest["step_source"] == "weight_version 4 + offset -1"


@pytest.mark.skipif("profiler_kwargs" not in inspect.signature(
    importlib.import_module("vllm.v1.engine.llm_engine").LLMEngine.start_profile).parameters,
    reason="this release's LLMEngine.start_profile has no profiler_kwargs (vLLM < 0.33)")
def test_native_llm_engine_profiler_kwargs_reach_the_worker_session(patched, tmp_path, monkeypatch):
    """vLLM 0.33's own chain, unwrapped by rlprof down to the worker:
    LLMEngine.start_profile -> InprocClient.profile -> EngineCore.profile ->
    Executor.profile (which checks the worker's signature) -> Worker.profile."""
    llm, worker = _stack(tmp_path, monkeypatch, step_start=1, step_end=3)
    engine = llm.llm_engine
    engine.vllm_config.parallel_config.worker_cls = "vllm.v1.worker.gpu_worker.Worker"
    engine.engine_core.engine_core.model_executor.vllm_config = engine.vllm_config
    engine._profile_session_active = False  # set by LLMEngine.__init__, which this wiring skips
    engine.start_profile(profiler_kwargs={"with_stack": True})
    _iterate(worker, [({"a": 3}, {})] + [({}, {"a": 1})] * 3)
    status = wait_done(lambda step: llm.profile_status(), None)
    assert status["state"] == "done", status
    assert _python_frames(tmp_path) > 0


@pytest.mark.skipif(ENV_ERA, reason="vLLM < 0.13 serves the routes from build_app (test_http_routes_are_ours)")
def test_profiler_kwargs_through_the_http_body(patched, tmp_path, monkeypatch):
    """The release's own router module with rlprof's routes, over the release's
    AsyncLLM wired to the in-process EngineCore (an async shim stands in for
    the ZMQ client: it calls the same EngineCore utility)."""
    import argparse

    from fastapi import FastAPI
    from fastapi.testclient import TestClient
    from vllm.v1.engine.async_llm import AsyncLLM

    llm, worker = _stack(tmp_path, monkeypatch, ignore_frontend=True)
    core = llm.llm_engine.engine_core.engine_core

    class AsyncCoreClient:
        async def call_utility_async(self, method, *args):
            return getattr(core, method)(*args)

    engine_client = object.__new__(AsyncLLM)
    engine_client.vllm_config, engine_client.engine_core = llm.llm_engine.vllm_config, AsyncCoreClient()
    router = importlib.import_module("vllm.entrypoints.serve.profile.api_router")
    app = FastAPI()
    app.state.args = argparse.Namespace(profiler_config=engine_client.vllm_config.profiler_config, api_key=None)
    app.state.engine_client = engine_client
    router.attach_router(app)
    with TestClient(app) as http:
        bad = http.post("/start_profile", json={"global_step": 11, "profiler_kwargs": {"use_cuda": True}})
        assert bad.status_code == 400 and bad.json()["error"]["field"] == "profiler_kwargs.use_cuda", bad.text
        answer = http.post("/start_profile", json={"global_step": 12, "step_start": 1, "step_end": 3,
                                                   "profiler_kwargs": {"with_stack": True, "record_shapes": True}})
        assert answer.status_code == 200, answer.text
        _iterate(worker, [({"a": 3}, {})] + [({}, {"a": 1})] * 3)
        assert wait_done(lambda step: http.get("/profile_status", params={"global_step": step}).json(), 12)[
            "state"] == "done"
    assert not session_dir(tmp_path, 11).exists()
    folder = session_dir(tmp_path, 12)
    assert _python_frames(folder) > 0
    trace = load_trace(manifest_traces(folder)["rank0"])
    assert any("Input Dims" in (e.get("args") or {}) for e in trace["traceEvents"])  # record_shapes


def _names_from_this_release(monkeypatch, tmp_path) -> dict[int, str]:
    """Worker trace names (without ``.<ns>.pt.trace.json.gz``) for a TP=2 x PP=2
    engine, as this release's own code builds them: ``get_worker_rank_suffix``
    (0.17+), the worker's ``<instance_id>-rank-<R>`` (0.12-0.16, read from its
    source), torch's ``tensorboard_trace_handler`` default (env era)."""
    import re
    import types

    ranks = {tp + 2 * pp: (pp, tp) for pp in range(2) for tp in range(2)}
    try:
        from vllm.distributed import parallel_state
        from vllm.distributed.utils import get_worker_rank_suffix
    except ImportError:
        get_worker_rank_suffix = None
    if get_worker_rank_suffix is not None:
        names = {}
        for rank, (pp, tp) in ranks.items():
            for group, value in (("dp", 0), ("pp", pp), ("tp", tp), ("dcp", 0), ("ep", 0)):
                monkeypatch.setattr(parallel_state, f"get_{group}_group",
                                    lambda value=value: types.SimpleNamespace(rank_in_group=value), raising=False)
            names[rank] = get_worker_rank_suffix(global_rank=rank)
        return names
    source = inspect.getsource(importlib.import_module("vllm.v1.worker.gpu_worker"))
    found = re.search(r'worker_name = (f"\{vllm_config\.instance_id\}[^"]*")', source)
    if found:
        return {rank: eval(found.group(1), {"vllm_config": types.SimpleNamespace(instance_id="a1b2c3d4"),  # noqa: S307
                                            "self": types.SimpleNamespace(rank=rank)}) for rank in ranks}
    written = []
    handler = torch.profiler.tensorboard_trace_handler(str(tmp_path), use_gzip=True)
    handler(types.SimpleNamespace(export_chrome_trace=lambda path, **_: written.append(path)))  # torch passes options
    return {None: re.sub(r"\.\d+\.pt\.trace\.json(\.gz)?$", "", os.path.basename(written[0]))}


def test_release_trace_names_read_back(monkeypatch, tmp_path):
    """What this release names a worker trace reads back as that rank, with
    and without a prefix (``rlprof_plugins.trace.format.naming``)."""
    from rlprof_plugins.trace.format import naming

    names = _names_from_this_release(monkeypatch, tmp_path)
    for rank, worker in names.items():
        for prefix in ((None, "rollout") if rank is not None and "-rank-" not in worker else (None,)):
            parsed = naming.parse(naming.trace_file(naming.vllm_worker_name(prefix, worker), 1795))
            assert parsed is not None and parsed.role == "worker", worker
            assert parsed.rank == rank and parsed.group in ((prefix or ""), "a1b2c3d4"), (worker, parsed)
            if parsed.position:
                assert (parsed.position["tp"], parsed.position["pp"]) == (rank % 2, rank // 2), (worker, parsed)
