"""NPU tests: the torch_npu stand-in (tests/stand_ins/npu) on the path.

In this process only for the duration of a test that asks for ``torch_npu``
(and in child processes through ``PYTHONPATH``), so no other test sees a
``torch_npu`` module or a ``torch.npu`` attribute.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

from tests.npu.sources import STAND_INS

NPU_PATH = str(STAND_INS / "npu")


@pytest.fixture
def torch_npu(monkeypatch):
    monkeypatch.syspath_prepend(NPU_PATH)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (NPU_PATH, os.environ.get("PYTHONPATH")) if p))
    had_npu = hasattr(torch, "npu")
    import torch_npu as module

    module.profiler.CALLS.clear()
    yield module
    for name in [n for n in sys.modules if n == "torch_npu" or n.startswith("torch_npu.")]:
        del sys.modules[name]
    if not had_npu and hasattr(torch, "npu"):
        del torch.npu

# The contract module runs only in the child interpreter test_vllm_ascend.py starts.
collect_ignore = [] if os.environ.get("RLPROF_CONTRACT_ENGINE") == "vllm-ascend" else ["contract_vllm_ascend.py"]
