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


def _sdist_url(index: str, filename: str) -> str:
    """A file's URL from a simple-repository page: JSON (PEP 691), or the HTML
    form (PEP 503) that some indexes serve whatever the Accept header asks."""
    import re
    from urllib.parse import urljoin

    if index.lstrip().startswith("{"):
        return next(f["url"] for f in json.loads(index)["files"] if f["filename"] == filename)
    for href, text in re.findall(r'<a[^>]*href="([^"]+)"[^>]*>([^<]+)</a>', index):
        if text.strip() == filename:
            return urljoin("https://pypi.org/simple/vllm-ascend/", href.replace("&amp;", "&"))
    raise FileNotFoundError(f"{filename} is not on the vllm-ascend index page")


def vllm_ascend_source() -> Path:
    """The unpacked sdist, with the ``_build_info.py`` its build writes."""
    target = CACHE / "engines" / f"vllm_ascend-{VLLM_ASCEND}"
    if (target / ".unpacked").exists():
        return target
    req = urllib.request.Request("https://pypi.org/simple/vllm-ascend/",
                                 headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        text = r.read().decode()
    url = _sdist_url(text, f"vllm_ascend-{VLLM_ASCEND}.tar.gz")
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
