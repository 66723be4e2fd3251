"""Real Ascend sources for the NPU tests: torch_npu's wheel and vllm-ascend's sdist.

Neither can run here (torch_npu needs CANN and an NPU), but their Python
sources are what the stand-in must mirror (torch_npu) and what the worker
patch must fit (vllm-ascend). Both are fetched once into ``.cache`` from
PyPI, like the engine releases of tests/compat.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import urllib.request
from pathlib import Path

from tests.compat.releases import CACHE

TORCH_NPU = "2.14.0"
VLLM_ASCEND = "0.23.0.post1"
VLLM_FOR_ASCEND = "0.24.0"  # the vLLM release (tests/compat) vllm-ascend 0.23 imports with
STAND_INS = Path(__file__).resolve().parents[1] / "stand_ins"


def torch_npu_wheel() -> Path:
    wheels = CACHE / "wheels"
    found = sorted(wheels.glob(f"torch_npu-{TORCH_NPU}-*.whl"))
    if not found:
        wheels.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-q",
                        "-d", str(wheels), f"torch-npu=={TORCH_NPU}"], check=True)
        found = sorted(wheels.glob(f"torch_npu-{TORCH_NPU}-*.whl"))
    return found[0]


def vllm_ascend_source() -> Path:
    """The unpacked sdist, with the ``_build_info.py`` its build writes."""
    target = CACHE / "engines" / f"vllm_ascend-{VLLM_ASCEND}"
    if (target / ".unpacked").exists():
        return target
    req = urllib.request.Request("https://pypi.org/simple/vllm-ascend/",
                                 headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        files = json.load(r)["files"]
    url = next(f["url"] for f in files if f["filename"] == f"vllm_ascend-{VLLM_ASCEND}.tar.gz")
    archive = CACHE / "wheels" / f"vllm_ascend-{VLLM_ASCEND}.tar.gz"
    archive.parent.mkdir(parents=True, exist_ok=True)
    if not archive.exists():
        urllib.request.urlretrieve(url, archive)
    tmp = target.with_name(target.name + ".tmp")
    with tarfile.open(archive) as tar:
        tar.extractall(tmp, filter="data")
    (tmp / f"vllm_ascend-{VLLM_ASCEND}").rename(target)
    tmp.rmdir()
    # setup.py's gen_build_info() for an Atlas A2 (910B) build
    (target / "vllm_ascend" / "_build_info.py").write_text("# Auto-generated file\n__device_type__ = 'A2'\n")
    (target / ".unpacked").write_text(archive.name + "\n")
    return target
