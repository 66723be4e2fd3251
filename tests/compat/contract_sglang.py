"""Contract tests for one SGLang release, against that release's own modules.

Run in a child interpreter by ``tests/compat/test_releases.py`` with the
release first on ``sys.path`` (``RLPROF_CONTRACT_VERSION`` names it) and
``RLPROF_DISABLE=1``, so the tests apply the patches themselves.

What runs for real: the release's ``ServerArgs`` parser and
``from_cli_args``, ``ProfileReq``/``ProfileReqOutput``, the scheduler's
profile handler (``SchedulerProfilerMixin.profile`` or
``SchedulerProfilerManager._profile``, built by its own constructor where it
has one), the HTTP server's FastAPI app with rlprof's routes (driven with
FastAPI's TestClient), torch.profiler and rlprof's sessions. What does not:
a model and SGLang's IPC. The tokenizer side's ``profile_communicator``
hands the ``ProfileReq`` straight to the scheduler's handler in-process, and
a batch is the patched ``Scheduler.run_batch`` wrapper around a small torch
computation. SGLang 0.5.23 (installed) is also served end to end by tests/e2e.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from packaging.version import Version

from rlprof_plugins.cli import compatibility as compat
from rlprof_plugins.store.layout import session_dir
from rlprof_plugins.patches import SGLANG_PATCHES
from rlprof_plugins.patches.sglang import http as sglang_http, start_requests, wire
from rlprof_plugins.patches.sglang import sessions as sglang_sessions
from rlprof_plugins.patches.sglang import scheduler as sglang_scheduler
from rlprof_plugins.patches.base import apply_guarded
from rlprof_plugins.patches.sglang.facts import version as sglang_version
from tests.compat.contract_common import (altered_module, applied_patches, check_doctor, check_patch_on_release,
                                         check_recorded_shapes, check_release_imported, filled, marker, try_import,
                                         wait_done)
from tests.helpers.traces import iteration_details, load_trace, manifest_traces, pause_events

RELEASE = os.environ["RLPROF_CONTRACT_VERSION"]
V = Version(RELEASE)
MIXIN_ERA = V < Version("0.5.13")
ROOT = Path(__file__).resolve().parents[2]


def test_the_release_under_test_is_the_one_imported():
    check_release_imported("sglang", sglang_version(), RELEASE)
    assert sglang_version() == RELEASE


def test_recorded_shapes_match_this_release():
    check_recorded_shapes(SGLANG_PATCHES, "sglang", RELEASE)


@pytest.mark.parametrize("patch", SGLANG_PATCHES, ids=lambda p: p.name)
def test_patch_applies_or_is_refused_with_one_warning(patch, caplog):
    check_patch_on_release(patch, sglang_version(), caplog)


def test_a_patch_whose_target_changed_is_off_and_the_rest_still_apply(caplog):
    if MIXIN_ERA:
        patch = sglang_scheduler.PROFILER_MIXIN_PATCH
        altered = altered_module(patch.module, "    def profile(", "    def profile_renamed(")
        cls = altered.SchedulerProfilerMixin
    else:
        patch = sglang_scheduler.PROFILER_MANAGER_PATCH
        altered = altered_module(patch.module, "    def _profile(", "    def _profile_renamed(")
        cls = altered.SchedulerProfilerManager
    before = dict(vars(cls))
    patch.revert()
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        assert not apply_guarded(patch, altered, sglang_version())
    said = [r.getMessage() for r in caplog.records if patch.name in r.getMessage()]
    assert len(said) == 1 and patch.feature in said[0] and RELEASE in said[0]
    assert dict(vars(cls)) == before
    other = sglang_http.HTTP_PATCH
    import importlib

    assert apply_guarded(other, importlib.import_module(other.module), sglang_version())
    other.revert()


def test_capabilities_in_the_table_hold_on_this_release():
    from sglang.srt.managers.scheduler import Scheduler

    caps = {c.feature: c.available for c in compat.capabilities("sglang", RELEASE)}
    assert caps["plugin loaded by SGLang's sglang.srt.plugins entry point"] == (
        try_import("sglang.srt.plugins") is not None)
    assert caps["stop completed from the scheduler's on_idle hook"] == hasattr(Scheduler, "on_idle")
    from sglang.srt.server_args import ServerArgs

    fields = getattr(ServerArgs, "__struct_fields__", None) or getattr(ServerArgs, "__dataclass_fields__", {})
    assert caps["global-step folders from the engine's weight version (step_source)"] == ("weight_version" in fields)


class _ConfigContext:
    """Stands in for the 0.5.23 era's published config (``runtime_context``): what
    ``record_config_updates`` overrides, ``config_value`` reads back."""

    def __init__(self, weight_version: str) -> None:
        self.leaves = {"weight_version": weight_version}

    def override(self, source: str, **fields) -> None:
        self.leaves.update(fields)

    def config_leaf(self, name: str):
        return self.leaves[name]


def test_the_weight_version_is_read_where_this_release_keeps_it(monkeypatch):
    """``step_source: weight_version`` reads what the release's own update path
    (``_update_weight_version_if_provided``, run after every weight update that
    carries ``weight_version``) leaves: ``server_args.weight_version`` or, where
    the manager has ``config_value``, the published config."""
    from types import SimpleNamespace

    from sglang.srt.managers import tokenizer_manager as module
    from rlprof_plugins.patches.sglang import weight_reader as weight_version

    manager = object.__new__(module.TokenizerManager)
    manager.server_args = SimpleNamespace(weight_version="default")
    if callable(getattr(module.TokenizerManager, "config_value", None)):
        context = _ConfigContext("default")
        monkeypatch.setattr(module, "get_context", lambda: context)
    read = weight_version.reader(manager)
    assert read() == "default"
    update = getattr(manager, "_update_weight_version_if_provided", None)
    if update is None:  # 0.5.5: only the --weight-version argument sets it
        manager.server_args.weight_version = "7"
    else:
        update("7")
    assert read() == "7"


def test_opt_in_autoload_loads_the_plugin_in_spawned_processes():
    """RLPROF_SGLANG_AUTOLOAD=1: rlprof_plugins.pth loads the plugin in the
    launching process and in every process it spawns; without it, nothing
    loads the plugin on releases without the entry-point group."""
    env = {k: v for k, v in os.environ.items() if k != "RLPROF_DISABLE"}

    def probe(**extra) -> dict:
        out = subprocess.run([sys.executable, "-m", "tests.compat.autoload_probe"], cwd=ROOT, timeout=600,
                             env={**env, **extra}, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    from concurrent.futures import ThreadPoolExecutor

    without_group = try_import("sglang.srt.plugins") is None
    with ThreadPoolExecutor(max_workers=2) as pool:  # each probe is mostly SGLang's imports, twice: side by side
        opted_in = pool.submit(probe, RLPROF_SGLANG_AUTOLOAD="1")
        left_out = pool.submit(probe) if without_group else None
        assert opted_in.result() == {"parent": True, "child": True}
        if left_out is not None:
            # no entry-point group: only the opt-in loads it (load_plugins is not imported here either way)
            assert left_out.result() == {"parent": False, "child": False}


# ---- the --profiler-config server argument ------------------------------------------
@pytest.fixture
def patched():
    applied = applied_patches(SGLANG_PATCHES, sglang_version())
    yield
    for patch in applied:
        patch.revert()


def test_profiler_config_argument(patched, tmp_path, monkeypatch, capsys):
    from sglang.srt.server_args import ServerArgs

    monkeypatch.delenv("RLPROF_PROFILER_CONFIG", raising=False)
    import argparse

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    good = {"torch_profiler_dir": str(tmp_path), "step_start": 2, "step_end": 5, "by_stage": True}
    ns = parser.parse_args(["--model-path", str(tmp_path), "--profiler-config", json.dumps(good)])
    try:
        ServerArgs.from_cli_args(ns)
    except Exception:
        pass  # SGLang's own checks of a model path that holds no model; ours ran first
    from rlprof_plugins.config.launch_config import from_environment

    config = from_environment()
    assert config.torch_profiler_dir == str(tmp_path)
    assert (config.options.step_start, config.options.step_end, config.options.by_stage) == (2, 5, True)
    bad = parser.parse_args(["--model-path", str(tmp_path), "--profiler-config", '{"step_strat": 2}'])
    with pytest.raises(SystemExit) as e:
        ServerArgs.from_cli_args(bad)
    assert "step_strat" in str(e.value) and "--profiler-config" in str(e.value)


# ---- scheduler plumbing: commands, window counting, stages, file naming --------------
def _scheduler():
    """The release's scheduler object holding the profiler: the Scheduler
    itself (mixin era) or its SchedulerProfilerManager (built by its own
    constructor). Returns (scheduler, profile handler)."""
    from sglang.srt.managers.scheduler import Scheduler

    sched = object.__new__(Scheduler)
    if MIXIN_ERA:
        for name in ("tp_rank", "pp_rank", "dp_rank", "moe_ep_rank"):
            setattr(sched, name, 0)
        for name in ("tp_size", "pp_size", "dp_size", "moe_ep_size"):
            setattr(sched, name, 1)
        sched.dp_tp_cpu_group = None
        sched.init_profiler()  # the mixin's own initialiser
        return sched, sched.profile
    from sglang.srt.distributed.parallel_state_wrapper import ParallelState
    from sglang.srt.managers.scheduler_components.profiler_manager import SchedulerProfilerManager

    manager = SchedulerProfilerManager(ps=filled(ParallelState), dp_tp_cpu_group=None,
                                       get_forward_ct=lambda: getattr(sched, "forward_ct", 0))
    sched.profiler_manager = manager
    return sched, manager._profile


def _send(handler, command: dict) -> dict:
    from rlprof_plugins.session.protocol import combine

    out = handler(wire.profile_req(command))
    assert out.success, out.message
    return combine(json.loads(out.message))


def _batches(sched, batches):
    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    run_batch = vars(Scheduler)["run_batch"]
    assert marker(run_batch) == sglang_scheduler.SCHEDULER_PATCH.name
    x = torch.ones(64, 64)
    for mode, reqs, tokens in batches:
        batch = object.__new__(ScheduleBatch)
        batch.forward_mode, batch.reqs, batch.extend_num_tokens = getattr(ForwardMode, mode), [object()] * reqs, tokens
        run_batch._self_wrapper(lambda b: _forward(sched, x), sched, (batch,), {})


def _forward(sched, x):
    """What the real run_batch does that rlprof reads: count the pass, run a model."""
    sched.forward_ct = getattr(sched, "forward_ct", 0) + 1
    return (x @ x).sum()


def _idle(sched):
    from sglang.srt.managers.scheduler import Scheduler

    hook = vars(Scheduler).get("on_idle") or vars(Scheduler)["self_check_during_idle"]
    assert marker(hook) == sglang_scheduler.SCHEDULER_PATCH.name
    hook._self_wrapper(lambda: None, sched, (), {})


def _status_of(handler):
    return lambda step: _send(handler, {"op": "status", "global_step": step})


needs_parallel_context = pytest.mark.skipif(
    V >= Version("0.5.16") and try_import("sglang.srt.runtime_context") is not None,
    reason="ranks come from SGLang's published runtime context, which only a running server sets up; "
           "tests/e2e serves this release end to end")


def _configure(monkeypatch, tmp_path, **ours):
    from rlprof_plugins.config.launch_config import ENV, parse_profiler_config

    monkeypatch.setenv(ENV, json.dumps({"torch_profiler_dir": str(tmp_path), "torch_profiler_with_stack": False,
                                        **ours}))
    return parse_profiler_config(os.environ[ENV])


@needs_parallel_context
def test_global_step_window_stages_and_file_names(patched, tmp_path, monkeypatch):
    config = _configure(monkeypatch, tmp_path)
    sched, handler = _scheduler()
    request = start_requests.build_request({"global_step": 37, "step_start": 1, "step_end": 4, "by_stage": True}, config)
    answer = _send(handler, request.to_command())
    assert answer["global_step"] == 37 and answer["state"] == "waiting", answer
    _batches(sched, [("EXTEND", 2, 8)] + [("DECODE", 2, 0)] * 5)
    assert wait_done(_status_of(handler), 37)["state"] == "done"
    folder = session_dir(tmp_path, 37)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["engine"] == "sglang" and manifest["engine_version"] == RELEASE
    decode = manifest_traces(folder, "decode")
    assert list(decode) == ["TP-0"] and decode["TP-0"].name.startswith("TP-0.")
    details = iteration_details(load_trace(decode["TP-0"]))
    assert sorted(details) == [1, 2, 3] and {d[0] for d in details.values()} == {"decode"}


@needs_parallel_context
def test_native_fields_stop_on_idle_and_a_second_session(patched, tmp_path, monkeypatch):
    config = _configure(monkeypatch, tmp_path)
    sched, handler = _scheduler()
    request = start_requests.build_request({"global_step": 5, "profile_prefix": "rollout"}, config)
    _send(handler, request.to_command())
    _batches(sched, [("EXTEND", 1, 5), ("DECODE", 1, 0), ("MIXED", 2, 4)])
    answer = _send(handler, {"op": "stop", "defer": True})
    assert answer["state"] in ("stopping", "exporting", "done"), answer
    _idle(sched)  # the scheduler's idle hook finishes the answered stop
    assert wait_done(_status_of(handler), 5)["state"] == "done"
    trace = manifest_traces(session_dir(tmp_path, 5))["TP-0"]
    assert trace.name.startswith("rollout-TP-0.")
    details = iteration_details(load_trace(trace))
    assert details[0] == ("prefill", 5, 0, 1) and details[1] == ("decode", 0, 1, 1) and details[2][0] == "prefill"
    # SGLang's num_steps means a window of that many iterations from the request
    request = start_requests.build_request({"global_step": 6, "num_steps": 2}, config)
    _send(handler, request.to_command())
    _batches(sched, [("DECODE", 1, 0)] * 3)
    assert wait_done(_status_of(handler), 6)["state"] == "done"
    assert sorted(iteration_details(load_trace(manifest_traces(session_dir(tmp_path, 6))["TP-0"]))) == [0, 1]
    # SGLang's start_step: the forward-pass number (from server start) recording begins with
    done = sched.forward_ct
    request = start_requests.build_request({"global_step": 7, "start_step": done + 3, "num_steps": 2}, config)
    assert _send(handler, request.to_command())["step_start"] == 2
    _batches(sched, [("DECODE", 1, 0)] * 5)
    assert wait_done(_status_of(handler), 7)["state"] == "done"
    assert sorted(iteration_details(load_trace(manifest_traces(session_dir(tmp_path, 7))["TP-0"]))) == [2, 3]


@needs_parallel_context
def test_the_idle_hook_ends_a_chunk_and_the_next_batch_starts_one(patched, tmp_path, monkeypatch):
    """The scheduler's idle hook (``on_idle``, or ``self_check_during_idle`` before 0.5.12) ends a chunked
    recording's running chunk; the next batch starts the next one: every iteration recorded (issue 43)."""
    config = _configure(monkeypatch, tmp_path)
    sched, handler = _scheduler()
    _send(handler, start_requests.build_request({"global_step": 8}, config).to_command())
    _batches(sched, [("EXTEND", 1, 5), ("DECODE", 1, 0)])
    _idle(sched)
    _idle(sched)  # the idle loop calls it on every pass: one end only
    _batches(sched, [("DECODE", 1, 0), ("DECODE", 1, 0)])
    assert _send(handler, {"op": "stop"})["state"] in ("exporting", "done")
    assert wait_done(_status_of(handler), 8)["state"] == "done"
    trace = load_trace(manifest_traces(session_dir(tmp_path, 8))["TP-0"])
    assert sorted(iteration_details(trace)) == [0, 1, 2, 3]
    causes = [p["args"]["cause"] for p in pause_events(trace)]
    assert causes == ["idle", "resume", "stop"], causes


def _native_req(start: bool, **fields):
    """A ``ProfileReq`` as a caller without rlprof's route builds it (gRPC mode's HTTP sidecar, 0.5.15+):
    the release's own type and kind field, the fields it defines."""
    import dataclasses

    from sglang.srt.managers.io_struct import ProfileReq, ProfileReqType

    names = getattr(ProfileReq, "__struct_fields__", None) or [f.name for f in dataclasses.fields(ProfileReq)]
    kind = ProfileReqType.START_PROFILE if start else ProfileReqType.STOP_PROFILE
    return ProfileReq(**{"req_type" if "req_type" in names else "type": kind},
                      **{k: v for k, v in fields.items() if k in names})


@needs_parallel_context
@pytest.mark.skipif(V < Version("0.5.6"), reason="this release's ProfileReq has no profile_prefix (SGLang 0.5.6+)")
def test_a_native_request_on_a_configured_scheduler_is_an_rlprof_session(patched, tmp_path, monkeypatch):
    """What gRPC mode's sidecar sends (SGLang's fields only; with_stack/record_shapes true and
    profile_by_stage/merge_profiles false when the body says nothing) runs the session those fields
    mean, its step named by the prefix (step_source profile_prefix); a stop answers once written."""
    _configure(monkeypatch, tmp_path, step_source="profile_prefix", by_stage=True)
    sched, handler = _scheduler()
    sidecar = dict(with_stack=True, record_shapes=True, profile_by_stage=False, merge_profiles=False,
                   profile_id=str(time.time()))
    out = handler(_native_req(True, profile_prefix="global_step_8", num_steps=3, **sidecar))
    assert out.success and out.message.startswith("rlprof: "), out.message
    assert json.loads(out.message[len("rlprof: "):])["global_step"] == 8
    _batches(sched, [("EXTEND", 1, 5)] + [("DECODE", 1, 0)] * 4)
    assert wait_done(_status_of(handler), 8)["state"] == "done"
    folder = session_dir(tmp_path, 8)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["step_source"] == "profile_prefix global_step_8" and manifest["by_stage"]  # the configured
    decode = manifest_traces(folder, "decode")["TP-0"]
    assert decode.name.startswith("global_step_8-TP-0.") and sorted(iteration_details(load_trace(decode))) == [1, 2]
    out = handler(_native_req(True, profile_prefix="global_step_9", **sidecar))
    assert out.success
    _batches(sched, [("DECODE", 1, 0)] * 2)
    out = handler(_native_req(False))
    assert out.success, out.message
    assert json.loads((session_dir(tmp_path, 9) / "manifest.json").read_text())["state"] == "done"  # when answered
    out = handler(_native_req(False))
    assert not out.success and "no profiling session is running" in out.message


@needs_parallel_context
def test_profiler_kwargs_set_one_sessions_torch_settings(patched, tmp_path, monkeypatch):
    """vLLM's per-session ``profiler_kwargs`` mean the same on SGLang: stacks
    (off in the config) on for one session only; a bad key or a contradiction names it."""
    from rlprof_plugins.errors import RequestError

    config = _configure(monkeypatch, tmp_path)
    sched, handler = _scheduler()
    for step, body in ((7, {"profiler_kwargs": {"with_stack": True}}), (8, {})):
        request = start_requests.build_request({"global_step": step, "step_start": 1, "step_end": 3, **body}, config)
        _send(handler, request.to_command())
        _batches(sched, [("EXTEND", 1, 5)] + [("DECODE", 1, 0)] * 3)
        assert wait_done(_status_of(handler), step)["state"] == "done"
    frames = {step: sum(1 for e in load_trace(manifest_traces(session_dir(tmp_path, step))["TP-0"])["traceEvents"]
                        if e.get("cat") == "python_function") for step in (7, 8)}
    assert frames[7] > 0 and frames[8] == 0, frames
    for body, field in (({"profiler_kwargs": {"schedule": 1}}, "profiler_kwargs.schedule"),
                        ({"with_stack": False, "profiler_kwargs": {"with_stack": True}}, "with_stack")):
        with pytest.raises(RequestError) as e:
            start_requests.build_request({"global_step": 9, **body}, config)
        assert e.value.field == field


@needs_parallel_context
def test_http_routes_end_to_end_in_process(patched, tmp_path, monkeypatch):
    """The release's FastAPI app with rlprof's routes; the tokenizer side's
    communicator hands each ProfileReq to the scheduler's handler."""
    from fastapi.testclient import TestClient

    import sglang.srt.entrypoints.http_server as http_server

    _configure(monkeypatch, tmp_path)
    sched, handler = _scheduler()

    class Communicator:  # SGLang's IPC, in-process
        def auto_create_handle_loop(self):
            pass

        async def profile_communicator(self, req):
            return [handler(req)]

    monkeypatch.setattr(http_server, "_global_state", type("S", (), {"tokenizer_manager": Communicator()})())
    client = TestClient(http_server.app)
    bad = client.post("/start_profile", json={"global_step": 3, "start_step": 5, "step_end": 9})
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "step_end"
    # step_start 1: the profiler starts in the batch (main) thread, as on a server where
    # the scheduler thread runs both; TestClient calls the handler from its own thread
    ok = client.post("/start_profile", json={"global_step": 3, "step_start": 1, "step_end": 3})
    assert ok.status_code == 200 and ok.json()["global_step"] == 3, ok.text
    assert client.post("/start_profile", json={"global_step": 4}).status_code == 409
    _batches(sched, [("EXTEND", 1, 5), ("DECODE", 1, 0), ("DECODE", 1, 0), ("DECODE", 1, 0)])
    deadline = time.monotonic() + 60
    while client.get("/profile_status", params={"global_step": 3}).json()["state"] != "done":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert sorted(iteration_details(load_trace(manifest_traces(session_dir(tmp_path, 3))["TP-0"]))) == [1, 2]


class _InProcess:
    """The release's own TokenizerManager with SGLang's IPC replaced by the
    scheduler's handler in this process (as test_http_routes... does)."""

    def __init__(self, handler):
        from sglang.srt.managers.tokenizer_manager import TokenizerManager

        self.manager = object.__new__(TokenizerManager)
        self.manager.auto_create_handle_loop = lambda: None

        async def profile_communicator(req):
            return [handler(req)]

        self.manager.profile_communicator = profile_communicator


@needs_parallel_context
def test_in_process_tokenizer_calls_go_through_rlprof(patched, tmp_path, monkeypatch):
    """verl's in-process call on the release's TokenizerManager: the keyword
    form (native SGLang >= 0.5.15 raises TypeError on it), rlprof's window,
    and a stop that returns once the trace is on disk."""
    import asyncio

    _configure(monkeypatch, tmp_path, step_start=1, step_end=3)
    sched, handler = _scheduler()
    tm = _InProcess(handler).manager
    out = asyncio.run(tm.start_profile(output_dir=str(tmp_path), with_stack=False, record_shapes=False,
                                       start_step=None, num_steps=None))
    assert out.success and json.loads(out.message)["state"] == "waiting", out
    _batches(sched, [("EXTEND", 1, 5), ("DECODE", 1, 0), ("DECODE", 1, 0), ("DECODE", 1, 0)])
    assert wait_done(_status_of(handler), None)["state"] == "done"
    traces = sorted(tmp_path.glob("TP-0.*.pt.trace.json.gz"))
    assert len(traces) == 1 and sorted(iteration_details(load_trace(traces[0]))) == [1, 2]

    # a stop-driven session: stop_profile returns with the file written
    out = asyncio.run(tm.start_profile(global_step=4, step_end=None))
    assert json.loads(out.message)["global_step"] == 4
    _batches(sched, [("EXTEND", 1, 5), ("DECODE", 1, 0), ("DECODE", 1, 0)])

    async def stop_while_idle():
        stop = asyncio.create_task(tm.stop_profile())
        await asyncio.sleep(0.05)
        _idle(sched)  # the scheduler's idle hook, on the thread that recorded
        return await stop

    answer = json.loads(asyncio.run(stop_while_idle()).message)
    assert answer["state"] == "done" and answer["files"], json.dumps(answer)
    assert all(Path(f).exists() for f in answer["files"])
    assert sorted(iteration_details(load_trace(manifest_traces(session_dir(tmp_path, 4))["TP-0"]))) == [1, 2]

    from rlprof_plugins.errors import RequestError

    with pytest.raises(RequestError) as e:
        asyncio.run(tm.start_profile(global_stpe=5))
    assert e.value.field == "global_stpe"


@needs_parallel_context
def test_engine_methods_take_every_request_field(patched, tmp_path, monkeypatch):
    """``sglang.Engine.start_profile(**fields)``: from 0.5.15 SGLang builds a
    ProfileReq first, which raises TypeError for global_step; through rlprof
    rlprof's and vLLM's fields work on every release, and the stop returns
    with the files."""
    import asyncio

    from sglang.srt.entrypoints.engine import Engine

    _configure(monkeypatch, tmp_path)
    sched, handler = _scheduler()
    engine = object.__new__(Engine)
    engine.loop, engine.tokenizer_manager = asyncio.new_event_loop(), _InProcess(handler).manager
    try:
        answer = engine.start_profile(global_step=11, delay_iterations=1, max_iterations=2)
        assert (answer["global_step"], answer["step_start"], answer["step_end"]) == (11, 1, 3), answer
        _batches(sched, [("EXTEND", 1, 5)] + [("DECODE", 1, 0)] * 3)
        assert engine.stop_profile()["state"] == "done"
        assert sorted(iteration_details(load_trace(manifest_traces(session_dir(tmp_path, 11))["TP-0"]))) == [1, 2]
        from rlprof_plugins.errors import RequestError

        with pytest.raises(RequestError) as e:
            engine.start_profile(global_step=12, activities=["CPU"], profile_stages=["prefill"])
        assert e.value.field == "profile_stages"
    finally:
        engine.loop.close()


def test_in_process_native_calls_reach_sglang_unchanged(patched, tmp_path, monkeypatch):
    """Unconfigured: SGLang's own method runs; the keyword form reaches it as
    the release's own request type (a ProfileReq from 0.5.15)."""
    import asyncio

    from sglang.srt.managers.io_struct import ProfileReq, ProfileReqOutput
    from sglang.srt.managers.tokenizer_manager import TokenizerManager

    monkeypatch.delenv("RLPROF_PROFILER_CONFIG", raising=False)
    monkeypatch.setattr(sglang_sessions, "_used", False)  # no rlprof session was started from this process
    seen = []

    async def execute(self, req):
        seen.append(req)
        return ProfileReqOutput(success=True, message="native")

    monkeypatch.setattr(TokenizerManager, "_execute_profile", execute)
    tm = _InProcess(lambda req: None).manager
    out = asyncio.run(tm.start_profile(output_dir=str(tmp_path), num_steps=3, start_step=None))
    assert out.message == "native" and isinstance(seen[0], ProfileReq)
    assert (seen[0].output_dir, seen[0].num_steps) == (str(tmp_path), 3)
    assert asyncio.run(tm.stop_profile()).message == "native"


def test_doctor_reports_this_release():
    report = check_doctor("sglang", RELEASE)
    if try_import("sglang.srt.plugins") is None:
        assert "RLPROF_SGLANG_AUTOLOAD" in report["plugin_loading"]


def test_native_requests_reach_sglangs_own_endpoint_when_unconfigured(patched, tmp_path, monkeypatch):
    """No rlprof configuration and no rlprof field: SGLang's own /start_profile
    runs, with the release's own body type (ProfileReqInput keywords up to
    0.5.14, the ProfileReq struct from 0.5.15)."""
    from fastapi.testclient import TestClient

    import sglang.srt.entrypoints.http_server as http_server

    monkeypatch.delenv("RLPROF_PROFILER_CONFIG", raising=False)
    calls = []

    class TokenizerManager:  # records what SGLang's endpoint hands on
        def auto_create_handle_loop(self):
            pass

        async def start_profile(self, *args, **kwargs):
            calls.append((args, kwargs))

    monkeypatch.setattr(http_server, "_global_state", type("S", (), {"tokenizer_manager": TokenizerManager()})())
    r = TestClient(http_server.app).post("/start_profile", json={"output_dir": str(tmp_path), "num_steps": 3})
    assert r.status_code == 200 and "Start profiling" in r.text, r.text
    [(args, kwargs)] = calls
    got = kwargs if kwargs else {k: getattr(args[0], k) for k in ("output_dir", "num_steps")}
    assert (got["output_dir"], got["num_steps"]) == (str(tmp_path), 3)
    from sglang.srt.managers import io_struct

    assert bool(kwargs) == hasattr(io_struct, "ProfileReqInput")  # keyword era up to 0.5.14


class _Exported(Exception):
    """Raised by the stand-in profiler's export: carries the path SGLang chose."""


def _native_trace_name(monkeypatch, tmp_path, tp: int, pp: int, prefix: str | None, stage: str | None) -> str:
    """The file name this release's own stop gives one rank's trace (TP=2 x PP=2):
    its ``stop_profile``/``_stop_profile`` runs up to the export, where a
    stand-in torch profiler reports the path instead of writing."""
    import types

    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    pos = types.SimpleNamespace(tp_rank=tp, pp_rank=pp, dp_rank=0, moe_ep_rank=0, tp_size=2, pp_size=2,
                                dp_size=1, num_dp_ranks=1, moe_ep_size=1)
    if MIXIN_ERA:
        from sglang.srt.managers.scheduler import Scheduler

        holder = object.__new__(Scheduler)
        for name, value in vars(pos).items():
            setattr(holder, name, value)
        stop = holder.stop_profile
    else:
        from sglang.srt.managers.scheduler_components import profiler_manager as module

        holder = object.__new__(module.SchedulerProfilerManager)
        holder.ps = pos
        if hasattr(module, "get_parallel"):
            monkeypatch.setattr(module, "get_parallel", lambda: pos)
        stop = holder._stop_profile

    def export(path):
        raise _Exported(path)

    holder.profile_in_progress = True
    holder.torch_profiler_output_dir = Path(tmp_path)
    holder.profile_prefix, holder.profile_id = prefix, "1795353928.61"
    holder.torch_profiler = types.SimpleNamespace(stop=lambda: None, export_chrome_trace=export)
    with pytest.raises(_Exported) as e:
        stop(stage={"prefill": ForwardMode.EXTEND, "decode": ForwardMode.DECODE, None: None}[stage])
    return os.path.basename(str(e.value.args[0]))


@pytest.mark.parametrize("prefix", [None, "rollout"])
@pytest.mark.parametrize("stage", [None, "prefill", "decode"])
def test_release_trace_names_read_back(monkeypatch, tmp_path, prefix, stage):
    """What this release names each rank's trace reads back as that rank, one
    merge group per session and stage (``rlprof_plugins.trace.format.naming``)."""
    from rlprof_plugins.trace.format import naming

    parsed = {}
    for pp in range(2):
        for tp in range(2):
            name = _native_trace_name(monkeypatch, tmp_path, tp, pp, prefix, stage)
            parsed[(pp, tp)] = naming.parse(name)
            assert parsed[(pp, tp)] is not None and parsed[(pp, tp)].role == "worker", name
    assert len({(p.group, p.stage) for p in parsed.values()}) == 1, parsed
    assert {p.stage for p in parsed.values()} == {stage}
    assert {key: (p.position["pp"], p.position["tp"]) for key, p in parsed.items()} == {k: k for k in parsed}
