"""SGLang on Ascend, against the real SGLang 0.5.23 modules (run in .venv-sglang)
with the torch_npu stand-in (tests/stand_ins/npu; what that verifies: docs/npu.md).

On NPU SGLang swaps torch.profiler for torch_npu's; rlprof's scheduler
sessions must record through the npu backend's own torch_npu calls instead.
"""

import argparse
import importlib
import json
import types

import pytest

from rlprof_plugins.patches.sglang import control as sglang_control, scheduler as sglang_scheduler
from rlprof_plugins.patches.base import apply_guarded
from rlprof_plugins.patches.sglang.facts import version as sglang_version
from rlprof_plugins.config.launch_config import ENV
from tests.npu.conftest import torch_npu  # noqa: F401  (the stand-in fixture)
from tests.unit.test_session import DECODE, run_iterations, settle, start

sglang = pytest.importorskip("sglang")
# Imported before the stand-in: with torch_npu loaded SGLang's imports take its NPU path.
SCHEDULER_MODULE = importlib.import_module(sglang_scheduler.SCHEDULER_PATCH.module)


def _scheduler(tmp_path, monkeypatch, config: dict):
    monkeypatch.setenv(ENV, json.dumps({"torch_profiler_dir": str(tmp_path), **config}))
    manager = types.SimpleNamespace(tp_rank=1, tp_size=2)
    return manager, types.SimpleNamespace()  # no get_parallel(): ranks from the scheduler's attributes


def test_an_ascend_scheduler_records_through_torch_npu(torch_npu, tmp_path, monkeypatch):  # noqa: F811
    import torch

    monkeypatch.setattr(torch.npu, "is_available", lambda: True)  # what torch_npu reports on an Ascend host
    manager, module = _scheduler(tmp_path, monkeypatch, {})
    ctl = sglang_control.controller_for(manager, module)
    assert start(ctl, global_step=5, session_id="s5", step_start=1, step_end=3)["ok"]
    run_iterations(ctl, 4, [DECODE])
    assert settle(ctl, 5)["state"] == "done"
    folder = tmp_path / "global_step_5"
    [profile] = [p for p in (folder / "ranks").iterdir() if p.name.endswith("_ascend_pt")]
    assert profile.name.startswith("TP-1_")  # SGLang's rank naming, torch_npu's folder naming
    calls = {name: kw for name, kw in json.loads((profile / "standin_calls.json").read_text())}
    assert calls["profile"]["activities"] == ["CPU", "NPU"] and calls["profile"]["with_stack"] is False
    trace = json.loads((profile / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text())
    assert sorted(e["name"].split()[1] for e in trace if e["name"].startswith("rlprof::iteration")) == ["1", "2"]


def test_backend_torch_on_an_ascend_scheduler_is_refused_naming_the_key(torch_npu, tmp_path, monkeypatch):  # noqa: F811
    import torch

    patch = sglang_scheduler.SCHEDULER_PATCH  # run_command answers only where its hooks are in place
    assert apply_guarded(patch, SCHEDULER_MODULE, sglang_version())
    monkeypatch.setattr(torch.npu, "is_available", lambda: True)
    manager, module = _scheduler(tmp_path, monkeypatch, {"backend": "torch"})
    try:
        reply = sglang_scheduler.run_command(manager, module, {"op": "start", "global_step": 1})
    finally:
        patch.revert()
    assert reply["ok"] is False and reply["invalid"]["field"] == "backend"
    assert not list(tmp_path.iterdir())


def test_device_npu_with_backend_torch_stops_the_launch(monkeypatch):
    from rlprof_plugins.patches.sglang.server_args import SERVER_ARGS_PATCH

    monkeypatch.delenv(ENV, raising=False)
    module = importlib.import_module(SERVER_ARGS_PATCH.module)
    assert apply_guarded(SERVER_ARGS_PATCH, module, sglang_version())
    try:
        parser = argparse.ArgumentParser()
        module.ServerArgs.add_cli_args(parser)
        args = parser.parse_args(["--model-path", "m", "--device", "npu", "--profiler-config", '{"backend": "torch"}'])
        with pytest.raises(SystemExit) as e:
            module.ServerArgs.from_cli_args(args)
        assert "backend" in str(e.value) and "npu" in str(e.value)
    finally:
        SERVER_ARGS_PATCH.revert()
