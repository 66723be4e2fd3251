"""vllm-ascend's real NPUWorker, patched and driven, in a child interpreter.

Run by test_vllm_ascend.py with vllm-ascend 0.23's source, vLLM 0.24's
(its pair) and the torch_npu stand-in first on ``sys.path``. Real: vLLM's
``LLM`` -> ``EngineCore`` -> ``UniProcExecutor.collective_rpc`` chain,
vllm-ascend's platform (device type ``npu``) and ``NPUWorker`` class, and
rlprof's sessions. Not real: the model (a matmul stands in for
``NPUWorker.execute_model``'s body, as in tests/compat) and torch_npu.
"""

from __future__ import annotations

import json
import logging

import torch

from rlprof_plugins.patches import VLLM_ASCEND_PATCHES, VLLM_PATCHES
from rlprof_plugins.patches.vllm import config as vllm_config_helper
from rlprof_plugins.patches.vllm_ascend.facts import version as vllm_ascend_version
from rlprof_plugins.patches.vllm_ascend.worker import NPU_WORKER_PATCH
from rlprof_plugins.patches.vllm.control import rank_suffix
from rlprof_plugins.patches.vllm.facts import version as vllm_version
from tests.compat.contract_common import applied_patches, check_patch_on_release, marker, wait_done
from tests.compat.vllm_wiring import llm_over, scheduler_output
from tests.helpers.traces import iteration_details, load_trace


def test_the_worker_patch_applies_to_the_real_npu_worker_and_reverts(caplog):
    assert vllm_version() == "0.24.0" and vllm_ascend_version().startswith("0.23")
    check_patch_on_release(NPU_WORKER_PATCH, vllm_ascend_version(), caplog)


def test_vllm_workers_patch_does_not_reach_the_npu_worker():
    from vllm.v1.worker.gpu_worker import Worker
    from vllm_ascend.worker.worker import NPUWorker

    assert not issubclass(NPUWorker, Worker)  # why a patch of its own is needed


def test_global_step_window_on_the_npu_worker(tmp_path, caplog):
    from vllm.config import DeviceConfig, ParallelConfig, VllmConfig
    from vllm.platforms import current_platform
    from vllm_ascend.worker.worker import NPUWorker

    assert current_platform.device_type == "npu"  # vllm-ascend's platform: backend auto -> npu
    applied = applied_patches(VLLM_PATCHES, vllm_version()) + applied_patches(VLLM_ASCEND_PATCHES, vllm_ascend_version())
    try:
        assert NPU_WORKER_PATCH in applied
        cfg = vllm_config_helper.build_profiler_config(
            {"profiler": "torch", "torch_profiler_dir": str(tmp_path), "npu_profiler_level": "Level1"})
        # DeviceConfig would parse "npu", a device only the real torch_npu registers with torch
        vllm_config = VllmConfig(parallel_config=ParallelConfig(), profiler_config=cfg,
                                 device_config=DeviceConfig(device="cpu"))
        worker = object.__new__(NPUWorker)
        worker.rank, worker.vllm_config, worker.profiler_config = 0, vllm_config, cfg
        llm = llm_over(worker, vllm_config)

        answer = llm.start_profile(global_step=37, step_start=1, step_end=4)
        assert answer["state"] == "waiting", answer
        execute = vars(NPUWorker)["execute_model"]
        assert marker(execute) == NPU_WORKER_PATCH.name
        x = torch.ones(64, 64)
        for i in range(6):  # one prompt of 5 tokens, then its decodes
            out = scheduler_output({"a": 5}, {}) if i == 0 else scheduler_output({}, {"a": 1})
            execute._self_wrapper(lambda so: ((x @ x).sum(), "output")[1], worker, (out,), {})
        status = wait_done(llm.profile_status, 37)
        assert status["state"] == "done", status
        folder = tmp_path / "global_step_37"
        manifest = json.loads((folder / "manifest.json").read_text())
        [entry] = manifest["files"]
        assert entry["kind"] == "npu_profile" and entry["path"].startswith(f"ranks/{rank_suffix(worker)}_")
        profile = folder / entry["path"]
        calls = {name: kw for name, kw in json.loads((profile / "standin_calls.json").read_text())}
        assert calls["_ExperimentalConfig"]["profiler_level"] == "Level1"
        assert calls["profile"]["activities"] == ["CPU", "NPU"]
        details = iteration_details(load_trace(profile / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"))
        assert sorted(details) == [1, 2, 3] and {d[0] for d in details.values()} == {"decode"}
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING and "rlprof" in r.getMessage()]
    finally:
        for patch in applied:
            patch.revert()
