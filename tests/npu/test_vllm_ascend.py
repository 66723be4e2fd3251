"""vllm-ascend's real worker module with rlprof's patch: contract_vllm_ascend.py
in a child interpreter (vllm-ascend and vLLM 0.24 sources, torch_npu stand-in)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

# `make test-extended` (CI's 25 minutes: docs/testing.md): in CI, the NPU backend runs in tests/npu/test_npu_backend.py
# and SGLang's NPU path in tests/sglang/test_sglang_npu.py
pytestmark = pytest.mark.extended

from tests.compat.releases import ROOT, ensure
from tests.helpers.installed import TEST_PATH
from tests.npu.sources import STAND_INS, VLLM_FOR_ASCEND, vllm_ascend_source

PYTHON = ROOT / ".venv-vllm" / "bin" / "python"


def test_vllm_ascend_worker_contract():
    if not PYTHON.exists():
        pytest.skip("no .venv-vllm; `make env` builds it")
    # this checkout's tests first: vllm-ascend's source ships a top-level `tests` package of its own
    path = [TEST_PATH, STAND_INS / "npu", STAND_INS / "cpu_imports", vllm_ascend_source(), ensure("vllm", VLLM_FOR_ASCEND)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(p) for p in path), RLPROF_DISABLE="1",
               VLLM_NO_USAGE_STATS="1", PYTHONWARNINGS="ignore", RLPROF_CONTRACT_ENGINE="vllm-ascend")
    cmd = [str(PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(ROOT),
           str(ROOT / "tests" / "npu" / "contract_vllm_ascend.py")]
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    tail = (result.stdout + result.stderr)[-6000:]
    sys.stdout.write(tail)
    assert result.returncode == 0, tail
    assert "3 passed" in result.stdout
