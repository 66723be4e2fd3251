"""What users install: the wheel and the sdist built from this tree.

A hand-kept package list once left ``rlprof_plugins.session`` out of the
wheel: every engine patch imports it, so a pip install loaded no patch while
every test (on the editable tree) passed. These tests build the wheel and the
sdist the way a release does (``python -m build``: the sdist, then the wheel
from the sdist), and check, on those files:

- the wheel holds every module and data file of ``rlprof_plugins/`` (its
  engine patches included) and nothing else, the ``.pth`` file, and the entry points
  setup.cfg declares;
- the sdist rebuilds the same wheel as the tree;
- installed alone into an empty folder, every module of the tree imports from
  it (a module missing from the wheel, or found elsewhere, fails);
- a package left out is named, by this check and by ``rlprof doctor``;
- the README's install lines (``pip install .``, and a wheel built with one
  command and installed from ``dist/``) work in a fresh virtual environment, and
  ``twine check`` passes (the release checklist, docs/testing.md).
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shutil
import site
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.installed import REPO, tree_files

PYTHON = sys.executable
SITE = site.getsitepackages()[0]
CHECKER = Path(__file__).with_name("import_every_module.py")
# What a copy of the checkout leaves behind: environments, caches, build output.
NOT_COPIED = shutil.ignore_patterns(".venv-*", ".cache", ".git", "build", "dist", "*.egg-info", "__pycache__",
                                    ".pytest_cache", "demo-traces", ".whl")
META = ".dist-info/"


@dataclass
class Dists:
    sdist: Path
    wheel: Path  # built from the sdist, as a release builds it
    wheel_from_tree: Path  # built from the checkout, as `make env` builds it


def run(cmd: list, **kw) -> subprocess.CompletedProcess:
    out = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600, **kw)
    assert out.returncode == 0, f"{cmd} exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


@pytest.fixture(scope="module")
def dists(tmp_path_factory) -> Dists:
    tmp = tmp_path_factory.mktemp("dists")
    src = tmp / "src"
    shutil.copytree(REPO, src, ignore=NOT_COPIED, symlinks=True)
    run([PYTHON, "-m", "build", "--no-isolation", "--outdir", tmp / "release", src])
    run([PYTHON, "-m", "build", "--no-isolation", "--wheel", "--outdir", tmp / "tree", src])
    (sdist,), (wheel,), (from_tree,) = (list((tmp / d).glob(g)) for d, g in
                                        (("release", "*.tar.gz"), ("release", "*.whl"), ("tree", "*.whl")))
    return Dists(sdist, wheel, from_tree)


def wheel_files(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as z:
        return {n: z.read(n) for n in z.namelist() if not n.endswith("/")}


def shipped() -> dict[str, Path]:
    """The tree's files as the wheel must hold them: {path in the wheel: path in the tree}."""
    return {("rlprof_plugins" / inside).as_posix(): path for path, inside in tree_files().items()}


def module_names() -> list[str]:
    """Every importable module of the tree, by the name it has once installed."""
    names = []
    for name in shipped():
        if name.endswith(".py") and not name.endswith("__main__.py"):
            names.append(name[:-3].removesuffix("/__init__").replace("/", "."))
    return sorted(names)


def install(wheel: Path, target: Path) -> Path:
    run([PYTHON, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", target, wheel])
    return target


def import_every_module(target: Path) -> dict:
    out = run([PYTHON, "-S", CHECKER, target, SITE, *module_names()])
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_wheel_holds_every_module_of_the_tree_and_nothing_else(dists):
    files = wheel_files(dists.wheel)
    packaged = {n for n in files if META not in n and n != "rlprof_plugins.pth"}
    want = shipped()
    missing, extra = sorted(set(want) - packaged), sorted(packaged - set(want))
    assert not missing, f"the wheel lacks {len(missing)} file(s) of the tree: {missing[:20]}"
    assert not extra, f"the wheel holds file(s) the tree does not: {extra[:20]}"
    changed = [n for n, path in want.items() if files[n] != path.read_bytes()]
    assert not changed, changed
    assert files["rlprof_plugins.pth"] == (REPO / "rlprof_plugins.pth").read_bytes()
    assert len([n for n in want if n.endswith(".json")]) >= 16  # the shape records, package data


def test_the_wheel_declares_the_entry_points_of_setup_cfg(dists):
    declared = configparser.ConfigParser()
    declared.read(REPO / "setup.cfg")
    built = configparser.ConfigParser()
    (name,) = [n for n in wheel_files(dists.wheel) if n.endswith(META + "entry_points.txt")]
    built.read_string(wheel_files(dists.wheel)[name].decode())
    want = {group: dict(line.split(" = ") for line in declared["options.entry_points"][group].strip().splitlines()
                        if not line.startswith("#"))
            for group in ("vllm.general_plugins", "sglang.srt.plugins", "verl.plugins", "console_scripts")}
    assert {g: dict(built[g]) for g in built.sections()} == want


def test_the_sdist_rebuilds_the_wheel_of_the_tree(dists):
    from_sdist, from_tree = wheel_files(dists.wheel), wheel_files(dists.wheel_from_tree)
    payload = lambda files: {n: b for n, b in files.items() if not n.endswith(META + "RECORD")}  # noqa: E731
    assert sorted(from_sdist) == sorted(from_tree)
    assert payload(from_sdist) == payload(from_tree)


def test_every_module_imports_from_the_installed_wheel_alone(dists, tmp_path):
    result = import_every_module(install(dists.wheel, tmp_path / "target"))
    assert result["problems"] == {}
    assert result["imported"] == len(module_names()) > 80


def test_a_package_left_out_is_named_by_the_check_and_by_doctor(dists, tmp_path):
    """What a wheel without ``rlprof_plugins.session`` (the defect) looks like to each check."""
    target = install(dists.wheel, tmp_path / "target")
    shutil.rmtree(target / "rlprof_plugins" / "session")
    problems = import_every_module(target)["problems"]
    assert "rlprof_plugins.session.controller" in problems
    assert "rlprof_plugins.patches.vllm.worker" in problems
    assert "No module named 'rlprof_plugins.session'" in problems["rlprof_plugins.patches.vllm.worker"]
    doctor = subprocess.run([PYTHON, "-S", "-c", "import sys; sys.path.insert(0, sys.argv[1]); sys.path.append(sys.argv[2]);"
                             "from rlprof_plugins.cli import main; sys.exit(main(['doctor', '--json']))",
                             str(target), SITE], capture_output=True, text=True, timeout=120)
    assert doctor.returncode == 1, doctor.stderr
    report = json.loads(doctor.stdout)["installation"]
    assert report["ok"] is False
    assert report["missing_module"] == "rlprof_plugins.session"
    assert report["location"] == str((target / "rlprof_plugins").resolve())


def readme_install_lines() -> list[str]:
    text = (REPO / "README.md").read_text()
    block = re.search(r"^## Install\n(?:(?!^## ).)*?```bash\n(.*?)```", text, re.S | re.M)
    assert block, "README.md has no '## Install' bash block"
    return [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.split("#")[0].strip()]


def test_the_readme_install_lines_work_in_a_fresh_environment(tmp_path):
    """The README's two ways, each run as written (a shell, in a copy of the tree) in a fresh virtual
    environment: ``pip install .``, and the wheel built with one command and installed from ``dist/``
    (what is copied to a cluster). Each gives a whole install that doctor names."""
    lines = readme_install_lines()
    from_tree = [line for line in lines if line == "pip install ."]
    wheel_way = [line for line in lines if line.startswith("pip ") and line not in from_tree]
    assert from_tree and wheel_way and [line for line in lines if not line.startswith("pip ")] == ["rlprof doctor"]
    assert any(line.startswith("pip wheel") for line in wheel_way) and wheel_way[-1].startswith("pip install dist/")
    src = tmp_path / "src"
    shutil.copytree(REPO, src, ignore=NOT_COPIED, symlinks=True)
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONSAFEPATH")}
    for name, commands in (("tree", from_tree), ("wheel", wheel_way)):
        venv = tmp_path / f"venv-{name}"
        run([PYTHON, "-m", "venv", venv], env=clean)
        env = {**clean, "PATH": f"{venv / 'bin'}{os.pathsep}{clean.get('PATH', '')}", "VIRTUAL_ENV": str(venv)}
        for line in commands:
            run(["bash", "-c", line], env=env, cwd=src)
        check_installed(venv, env)
    assert len(list((src / "dist").glob("rlprof_plugins-*.whl"))) == 1


def check_installed(venv: Path, env: dict) -> None:
    doctor = subprocess.run([venv / "bin" / "rlprof", "doctor"], capture_output=True, text=True, timeout=120, env=env)
    # No engine in this environment: doctor says so and exits 1, after saying the install is whole.
    assert doctor.returncode == 1
    assert "complete (the engine plugins import)" in doctor.stdout
    assert "no supported engine" in doctor.stderr
    probe = run([venv / "bin" / "python", "-c", "import importlib.metadata as m, json, rlprof_plugins.patches;"
                 "print(json.dumps({g: [e.value for e in m.entry_points(group=g)] for g in "
                 "('vllm.general_plugins', 'sglang.srt.plugins', 'verl.plugins')}))"], env=env, cwd=venv)
    assert not probe.stderr.strip(), probe.stderr  # the .pth file runs at every start, silently
    assert json.loads(probe.stdout) == {"vllm.general_plugins": ["rlprof_plugins.entry_points.vllm:register"],
                                        "sglang.srt.plugins": ["rlprof_plugins.entry_points.sglang:register"],
                                        "verl.plugins": ["rlprof_plugins.entry_points.verl"]}


def test_twine_check_passes(dists):
    out = run([PYTHON, "-m", "twine", "check", "--strict", dists.sdist, dists.wheel])
    assert out.stdout.count("PASSED") == 2, out.stdout
