"""The GPU proof kit end to end on CPU (docs/gpu.md): built from the wheel users install, under 64 MiB,
installed with no index into a fresh virtual environment that has only torch, and its check passing
with ``--device cpu``. The same script runs on a GPU machine with ``--device cuda``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "gpu_check.py"
DEPS = REPO / ".cache" / "gpu-kit-deps"  # make env downloads them (examples/gpu_check.py deps)
# torch and what torch imports: all a GPU machine's environment is assumed to hold
TORCH_ONLY = ("torch", "torchgen", "functorch", "typing_extensions", "sympy", "mpmath", "networkx", "jinja2",
              "markupsafe", "fsspec", "filelock", "numpy", "numpy.libs")


def the_wheel() -> Path:
    wheels = sorted((REPO / ".cache" / "dist").glob("rlprof_plugins-*.whl"))
    assert wheels, "make env builds the wheel into .cache/dist"
    return wheels[-1]


def torch_only_venv(path: Path) -> Path:
    """A fresh venv (with pip) whose only packages are torch and its imports, linked from the test
    environment rather than installed (seconds, not minutes); returns its python."""
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    python = path / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    import torch

    source = Path(torch.__file__).resolve().parents[1]
    linked = path / "torch-only"
    linked.mkdir()
    for name in TORCH_ONLY:
        if (source / name).exists():
            (linked / name).symlink_to(source / name)
        elif (source / f"{name}.py").exists():
            (linked / f"{name}.py").symlink_to(source / f"{name}.py")
    (site / "torch-only.pth").write_text(str(linked) + "\n")
    return python


def clean_env() -> dict[str, str]:
    """No index, no find-links, no path of the test environment: only what the kit brings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON", "VIRTUAL_ENV"))}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


@pytest.fixture(scope="module")
def kit(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("kit") / "gpu-kit"
    done = subprocess.run([sys.executable, str(SCRIPT), "kit", str(out), "--wheel", str(the_wheel()),
                           "--deps", str(DEPS)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_the_kit_holds_every_dependency_for_each_python_and_platform_under_64_mib(kit):
    size = sum(p.stat().st_size for p in kit.rglob("*") if p.is_file())
    assert size < 64 * 2**20, size
    wheels = [p.name for p in (kit / "wheels").glob("*.whl")]
    assert (kit / "gpu_check.py").is_file() and the_wheel().name in wheels
    assert {p.name for p in (kit / "rlprof_selftest").glob("*.py")} == {
        p.name for p in (REPO / "examples" / "rlprof_selftest").glob("*.py")}  # the self-test travels whole
    with zipfile.ZipFile(the_wheel()) as whl:
        metadata = whl.read(next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    assert "Requires-Dist: wrapt" in metadata and "Requires-Dist: nvtx" in metadata  # what the kit must bring
    for dependency in ("wrapt", "nvtx", "msgspec", "zlib_ng"):  # with the fast extra's
        for python in ("cp310", "cp311", "cp312"):
            for arch in ("x86_64", "aarch64"):
                assert any(w.startswith(dependency + "-") and f"-{python}-" in w and arch in w for w in wheels), (
                    dependency, python, arch)
    assert any(w.startswith("packaging-") and w.endswith("py3-none-any.whl") for w in wheels)


def test_the_check_installs_with_no_index_and_passes_on_cpu(kit, tmp_path):
    python = torch_only_venv(tmp_path / "venv")
    env = clean_env()
    missing = subprocess.run([str(python), "-c", "import torch, importlib.util as u; "
                              "print([m for m in ('rlprof_plugins', 'wrapt', 'nvtx', 'msgspec') if u.find_spec(m)])"],
                             capture_output=True, text=True, env=env, cwd=tmp_path)
    assert missing.returncode == 0 and missing.stdout.strip() == "[]", (missing.stdout, missing.stderr[-2000:])
    out = tmp_path / "result"
    done = subprocess.run([str(python), str(kit / "gpu_check.py"), "check", "--device", "cpu", "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    result = json.loads((out / "gpu-check-result.json").read_text())
    parts = {p["name"]: p for p in result["selftest"]["parts"]}
    assert result["ok"] and result["machine"]["torch"] and result["rlprof_plugins"]
    for name in ("recording and export", "stage traces", "chunks, stitched", "rlprof check", "rlprof report",
                 "merged trace checked"):
        assert parts[name]["state"] == "ok", parts[name]
    for name in ("kernels in every iteration", "memory snapshot in torch's viewer", "device time in the report",
                 "CUDA graph decode"):
        assert parts[name]["state"] == "skipped", parts[name]  # a CPU has none: named, not passed
    assert result["results_row"].startswith(f"| {result['machine']['date']} | CPU |")
    # the environment itself is unchanged: the kit went into the results folder only
    after = subprocess.run([str(python), "-c", "import importlib.util as u; print(u.find_spec('rlprof_plugins'))"],
                           capture_output=True, text=True, env=env, cwd=tmp_path)
    assert after.stdout.strip() == "None"
