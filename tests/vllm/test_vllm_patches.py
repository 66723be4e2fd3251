"""Each vLLM patch against the real vLLM 0.32 modules: apply, revert, refuse."""

import importlib
import logging

import pytest

from rlprof_plugins.patches import VLLM_PATCHES
from rlprof_plugins.patches.base import resolve, apply_guarded
from rlprof_plugins.patches.vllm.worker import WORKER_PATCH
from rlprof_plugins.patches.vllm.facts import version as vllm_version


INSTALLED = [p for p in VLLM_PATCHES if p.supports(vllm_version() or "")]


def test_installed_vllm_is_in_the_declared_range():
    version = vllm_version()
    assert version and version.startswith("0.32.0")
    # every patch but the env-era ones (vLLM < 0.13) applies to 0.32
    assert {p.name for p in VLLM_PATCHES} - {p.name for p in INSTALLED} == {
        "vllm.profiler_config.env_era", "vllm.api_router.env_era"}


@pytest.mark.parametrize("patch", INSTALLED, ids=lambda p: p.name)
def test_patch_applies_and_reverts_on_real_module(patch):
    module = importlib.import_module(patch.module)
    was_applied = patch.applied
    patch.revert()
    pristine = {}
    for target in patch.targets:
        parent, attr = resolve(module, target) if target in patch.wrap else (resolve(module, target)[0], None)
        if attr is not None:
            pristine[target] = vars(parent).get(attr)
        else:
            assert not hasattr(parent, target.rsplit(".", 1)[1]), f"{target} exists without the patch"
    try:
        assert apply_guarded(patch, module, vllm_version())
        for target in patch.wrap:
            parent, attr = resolve(module, target)
            wrapper = vars(parent)[attr]
            assert getattr(getattr(wrapper, "__func__", wrapper), "_self_rlprof_patch", None) == patch.name
        for target in patch.add:
            assert hasattr(*resolve(module, target))
        patch.revert()
        for target, original in pristine.items():
            parent, attr = resolve(module, target)
            assert vars(parent).get(attr) is original
        for target in patch.add:
            assert not hasattr(*resolve(module, target))
    finally:
        if was_applied:
            apply_guarded(patch, module, vllm_version())


def test_altered_worker_disables_only_its_feature(monkeypatch, caplog):
    """A release whose Worker has no ``profile`` (the last target): the patch
    refuses whole, so the earlier targets are left unwrapped too."""
    from vllm.v1.worker import gpu_worker

    was_applied = WORKER_PATCH.applied
    WORKER_PATCH.revert()
    original_execute = vars(gpu_worker.Worker)["execute_model"]
    monkeypatch.delattr(gpu_worker.Worker, "profile")
    assert not hasattr(gpu_worker.Worker, "profile")  # WorkerBase has none either
    try:
        with caplog.at_level(logging.WARNING, logger="rlprof"):
            assert not apply_guarded(WORKER_PATCH, gpu_worker, vllm_version())
            assert not apply_guarded(WORKER_PATCH, gpu_worker, vllm_version())
        assert vars(gpu_worker.Worker)["execute_model"] is original_execute
        assert not WORKER_PATCH.applied
        warnings = [r.getMessage() for r in caplog.records if r.name == "rlprof"]
        assert len(warnings) == 1
        assert "rlprof step windows and global-step folders is off on vllm 0.32.0" in warnings[0]
    finally:
        monkeypatch.undo()
        if was_applied:
            apply_guarded(WORKER_PATCH, gpu_worker, vllm_version())


def test_worker_without_hooks_answers_unavailable():
    """A real vLLM ``Worker`` whose class the patch does not wrap says the hooks
    are missing; the same worker with the patch applied gets past that check."""
    from vllm.v1.worker import gpu_worker

    from rlprof_plugins.patches.vllm.worker_hooks import worker_control

    worker = gpu_worker.Worker.__new__(gpu_worker.Worker)  # no engine behind it: only the checks run
    was_applied = WORKER_PATCH.applied
    WORKER_PATCH.revert()
    try:
        reply = worker_control(worker, {"op": "status"})
        assert reply["ok"] is False and "hooks are not installed" in reply["unavailable"], reply
        assert apply_guarded(WORKER_PATCH, gpu_worker, vllm_version())
        reply = worker_control(worker, {"op": "status"})
        assert "profiler config is not handled" in reply["unavailable"], reply  # the next check answers
    finally:
        WORKER_PATCH.revert()
        if was_applied:
            apply_guarded(WORKER_PATCH, gpu_worker, vllm_version())


def test_engine_profile_falls_back_to_vllms_own_where_the_worker_hooks_are_missing(caplog):
    """EngineCore.profile (the Rust frontend's way in) runs rlprof sessions through the workers'
    hooks; a worker whose hooks did not apply answers `unavailable`, and the call then runs vLLM's
    own profiler, as without rlprof, with one warning."""
    import types

    from rlprof_plugins.patches.vllm import engine_profile
    from rlprof_plugins.patches.vllm.config import build_profiler_config
    from rlprof_plugins.session.protocol import unavailable_reply

    cfg = build_profiler_config({"profiler": "torch", "torch_profiler_dir": "/tmp/rlprof-unused"})
    executor = types.SimpleNamespace(collective_rpc=lambda fn, args=(): [unavailable_reply("no hooks here")])
    engine = types.SimpleNamespace(vllm_config=types.SimpleNamespace(profiler_config=cfg), model_executor=executor)
    native = []
    with caplog.at_level(logging.WARNING):
        for call in ((True, "p"), (False,)):
            engine_profile._profile(lambda *a, **k: native.append(a), engine, call, {})
    assert native == [(True, "p"), (False,)]
    assert sum("runs vLLM's own profiler" in r.getMessage() for r in caplog.records) == 1
