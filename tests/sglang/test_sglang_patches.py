"""The SGLang patches against the real SGLang 0.5.23 modules (run in .venv-sglang)."""

import argparse
import importlib
import logging
import types

import pytest

from rlprof_plugins.patches import SGLANG_PATCHES
from rlprof_plugins.patches.base import apply_guarded
from rlprof_plugins.patches.sglang.iterations import iteration_info
from rlprof_plugins.patches.sglang.facts import version as sglang_version

sglang = pytest.importorskip("sglang")


@pytest.fixture
def patched():
    installed = [p for p in SGLANG_PATCHES if p.supports(sglang_version())]
    modules = {p.name: importlib.import_module(p.module) for p in installed}
    for patch in installed:
        assert apply_guarded(patch, modules[patch.name], sglang_version()), patch.name
    yield modules
    for patch in installed:
        patch.revert()


def test_every_patch_applies_and_reverts_on_the_installed_release():
    installed = [p for p in SGLANG_PATCHES if p.supports(sglang_version())]
    assert {p.name for p in SGLANG_PATCHES} - {p.name for p in installed} == {"sglang.scheduler.profiler_mixin"}
    for patch in installed:
        module = importlib.import_module(patch.module)
        methods = [t for t in patch.wrap if "." in t]
        functions = {t: getattr(module, t, None) for t in patch.wrap if "." not in t}  # module-level
        before = {t.split(".")[0]: dict(vars(getattr(module, t.split(".")[0]))) for t in methods}
        assert apply_guarded(patch, module, sglang_version()), patch.name
        assert patch.applied
        assert all(getattr(module, t) is not f for t, f in functions.items() if f is not None), patch.name
        patch.revert()
        for cls_name, attrs in before.items():
            now = vars(getattr(module, cls_name))
            for target in methods:
                attr = target.split(".", 1)[1]
                if target.split(".")[0] == cls_name:
                    assert now.get(attr) is attrs.get(attr), target
        for target, original in functions.items():
            assert getattr(module, target, None) is original, target


def test_profiler_config_flag_coexists_with_other_plugins_hooks(patched):
    """Another plugin hooks ServerArgs.add_cli_args through SGLang's
    HookRegistry (which unwraps staticmethods); our flag must survive it."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType
    from sglang.srt.server_args import ServerArgs

    seen = []
    target = "sglang.srt.server_args.ServerArgs.add_cli_args"
    HookRegistry.register(target, lambda result, parser: seen.append(parser), HookType.AFTER)
    try:
        HookRegistry._apply_target(target, HookRegistry._hooks[target])
        parser = argparse.ArgumentParser()
        ServerArgs.add_cli_args(parser)
        assert seen == [parser]
        args = parser.parse_args(["--model-path", "m", "--profiler-config", '{"step_start": 1}'])
        assert args.rlprof_profiler_config == '{"step_start": 1}'
    finally:
        HookRegistry._hooks.pop(target, None)


def test_profiler_config_is_validated_and_handed_to_spawned_processes(patched, monkeypatch):
    from sglang.srt.server_args import ServerArgs

    monkeypatch.delenv("RLPROF_PROFILER_CONFIG", raising=False)
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    good = parser.parse_args(["--model-path", "m", "--profiler-config", '{"step_start": 1, "step_end": 3}'])
    ServerArgs.from_cli_args(good)
    import json
    import os

    assert json.loads(os.environ["RLPROF_PROFILER_CONFIG"])["step_end"] == 3
    bad = parser.parse_args(["--model-path", "m", "--profiler-config", '{"step_end": 0}'])
    with pytest.raises(SystemExit) as e:
        ServerArgs.from_cli_args(bad)
    assert "step_end" in str(e.value)


def test_memory_on_a_cpu_server_stops_the_launch_naming_the_key(patched, monkeypatch):
    from sglang.srt.server_args import ServerArgs

    monkeypatch.delenv("RLPROF_PROFILER_CONFIG", raising=False)
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    args = parser.parse_args(["--model-path", "m", "--device", "cpu", "--profiler-config", '{"memory": true}'])
    with pytest.raises(SystemExit) as e:
        ServerArgs.from_cli_args(args)
    assert "key 'memory'" in str(e.value) and "this host's device is cpu" in str(e.value)
    assert "RLPROF_PROFILER_CONFIG" not in __import__("os").environ  # nothing handed on


def test_http_routes_replaced_with_sglang_auth_level_and_restored():
    from fastapi.routing import APIRoute

    from rlprof_plugins.patches.sglang.http import HTTP_PATCH

    http = importlib.import_module("sglang.srt.entrypoints.http_server")
    originals = {r.path: r for r in http.app.router.routes if isinstance(r, APIRoute)}
    assert apply_guarded(HTTP_PATCH, http, sglang_version())
    try:
        ours = {r.path: r for r in http.app.router.routes if isinstance(r, APIRoute)}
        for path in ("/start_profile", "/stop_profile", "/profile_status"):
            assert ours[path].name.startswith("rlprof_")
            assert ours[path].endpoint._auth_level == originals["/start_profile"].endpoint._auth_level
        assert ours["/start_profile"].methods == originals["/start_profile"].methods
    finally:
        HTTP_PATCH.revert()
    after = {r.path: r for r in http.app.router.routes if isinstance(r, APIRoute)}
    assert after == originals


def test_a_changed_engine_disables_only_that_feature_with_one_warning(caplog):
    """A release where the target is gone: one warning naming the feature and
    version; the module is left exactly as it was."""
    from rlprof_plugins.patches.sglang.scheduler import PROFILER_MANAGER_PATCH

    altered = types.ModuleType(PROFILER_MANAGER_PATCH.module)

    class SchedulerProfilerManager:  # as if _profile had been renamed upstream
        def handle_profile(self, req):
            return req

    altered.SchedulerProfilerManager = SchedulerProfilerManager
    before = dict(vars(SchedulerProfilerManager))
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        assert not apply_guarded(PROFILER_MANAGER_PATCH, altered, "0.5.23")
        assert not apply_guarded(PROFILER_MANAGER_PATCH, altered, "0.5.23")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert PROFILER_MANAGER_PATCH.feature in warnings[0] and "0.5.23" in warnings[0]
    assert dict(vars(SchedulerProfilerManager)) == before
    assert not PROFILER_MANAGER_PATCH.applied


class Batch:
    def __init__(self, mode, size, extend_tokens=0, decoding=0):
        self.forward_mode, self._size, self.extend_num_tokens = mode, size, extend_tokens
        self.decoding_reqs = [object()] * decoding

    def batch_size(self):
        return self._size


def test_stage_of_each_forward_mode():
    from sglang.srt.model_executor.forward_batch_info import ForwardMode as M

    assert iteration_info(Batch(M.EXTEND, 2, 30)).stage == "prefill"
    assert iteration_info(Batch(M.DECODE, 3)).stage == "decode"
    verify = iteration_info(Batch(M.TARGET_VERIFY, 2, 8))
    assert verify.stage == "decode" and verify.decode_tokens == 8  # native SGLang calls this prefill
    mixed = iteration_info(Batch(M.MIXED, 3, 12, decoding=2))
    assert (mixed.stage, mixed.prefill_tokens, mixed.decode_tokens) == ("prefill", 10, 2)
    assert iteration_info(Batch(M.IDLE, 0)) is None
    assert iteration_info(Batch(M.PREBUILT, 2)) is None  # PD-disaggregation placeholder, no forward


def test_sglang_plugins_allowlist_leaves_rlprof_out(monkeypatch):
    """What the TP=2 end-to-end server relies on to prove the opt-in loader:
    with SGLANG_PLUGINS naming another plugin, SGLang does not load ours."""
    from sglang.srt.plugins import load_plugins_by_group

    monkeypatch.setenv("SGLANG_PLUGINS", "not-rlprof")
    assert "rlprof" not in load_plugins_by_group("sglang.srt.plugins")
    monkeypatch.delenv("SGLANG_PLUGINS")
    assert "rlprof" in load_plugins_by_group("sglang.srt.plugins")


def test_a_profile_request_that_raises_on_the_scheduler_fails_the_request_not_the_scheduler(caplog, monkeypatch):
    """SGLang's own ``_init_profile`` raising (a value its route let through that its profiler cannot use)
    would end the scheduler's event loop; through rlprof's wrapper the request fails with the reason."""
    from sglang.srt.managers.io_struct import ProfileReq, ProfileReqOutput

    from rlprof_plugins.patches.sglang.scheduler import _wrap_profile

    monkeypatch.delenv("RLPROF_PROFILER_CONFIG", raising=False)  # an unconfigured scheduler: SGLang's own path

    def native(recv_req):
        raise TypeError("'>' not supported between instances of 'int' and 'str'")

    scheduler = types.SimpleNamespace()  # no rlprof controller on it
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        out = _wrap_profile(native, scheduler, (ProfileReq(start_step=15, num_steps=5),), {})
    assert isinstance(out, ProfileReqOutput) and out.success is False
    assert "TypeError" in out.message and "'>' not supported" in out.message
    assert any("keeps serving" in m for m in caplog.messages), caplog.messages
