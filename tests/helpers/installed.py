"""The tests run the package users install: the wheel ``make env`` builds from this tree.

``make env`` installs that wheel into each engine environment (never the
editable tree) and puts this checkout on the path after site-packages
(``rlprof-tests.pth``), so ``tests`` imports while ``rlprof_plugins`` always
comes from the installed wheel, in the test process and in every engine and
script it starts (the wheel's own ``rlprof_plugins.pth`` imports it first, at
interpreter start). A child process that puts something first on its path (an
old release's source, verl's site, both of which ship a ``tests`` package)
puts ``TEST_PATH`` before it: a folder whose only entry links to ``tests/``.
``PYTHONSAFEPATH=1`` keeps ``python -m``/``-c`` from putting the working
directory (the tree) first. ``stale()`` tells when the installed
package no longer matches the tree: a change made after the last ``make env``.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# A folder whose only entry is a link to tests/: on a path, it gives `tests` and no tree package.
TEST_PATH = REPO / ".cache" / "test-path"
# Source folder -> where its files sit inside the installed rlprof_plugins package.
SHIPPED = {REPO / "rlprof_plugins": Path(".")}
SUFFIXES = (".py", ".json")


def tree_record_path(engine: str, release: str) -> Path:
    """Where ``make shapes`` writes a release's shape record: the tree, not the installed package."""
    return REPO / "rlprof_plugins" / "patches" / "shape_records" / engine / f"{release}.json"


def tree_files() -> dict[Path, Path]:
    """Every file of the tree that ships, as {path in the tree: path inside the package}."""
    out = {}
    for folder, inside in SHIPPED.items():
        for path in sorted(folder.rglob("*")):
            if path.suffix in SUFFIXES and path.is_file() and "__pycache__" not in path.parts:
                out[path] = inside / path.relative_to(folder)
    return out


def stale(package_dir: Path) -> list[str]:
    """The tree's files the installed package lacks or holds in another version (not the shape records
    while ``make shapes`` rewrites them: each release's run writes its own, the next make env ships them)."""
    import os

    rewriting = os.environ.get("RLPROF_UPDATE_SHAPES") == "1"
    out = []
    for path, inside in tree_files().items():
        if rewriting and "shape_records" in path.parts:
            continue
        installed = package_dir / inside
        if not installed.is_file():
            out.append(f"{inside} (missing)")
        elif installed.read_bytes() != path.read_bytes():
            out.append(str(inside))
    return out


def installed_package(python: str | Path) -> Path:
    """Where ``python``'s environment has rlprof_plugins installed (its site-packages)."""
    import subprocess

    # Not ``-S``: a venv's site-packages is set up by the site module.
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    return Path(site) / "rlprof_plugins"


def imported_package(python: str | Path, env: dict[str, str]) -> Path:
    """Where ``python`` imports rlprof_plugins from, run with ``env`` (an engine's own), from the checkout."""
    import subprocess

    out = subprocess.run([str(python), "-c", "import os, rlprof_plugins; print(os.path.dirname(rlprof_plugins.__file__))"],
                         capture_output=True, text=True, check=True, env=env, cwd=REPO).stdout.strip()
    return Path(out)


def loaded_from(log: str) -> set[str]:
    """Every install the engine processes of a server log loaded the plugin from."""
    import re

    return set(re.findall(r"rlprof: \S+ plugin \S+ loaded from (\S+) \(", log))


def check_installed() -> str | None:
    """Why the tests cannot run on the installed package, or None."""
    import rlprof_plugins

    package_dir = Path(rlprof_plugins.__file__).resolve().parent
    if package_dir == (REPO / "rlprof_plugins").resolve():
        return (f"rlprof_plugins was imported from the source tree ({package_dir}), not from an installed wheel: "
                "run the tests through `make test`/`make unit` (Python 3.11+, PYTHONSAFEPATH=1) after `make env`")
    differ = stale(package_dir)
    if differ:
        shown = ", ".join(differ[:5]) + (f" and {len(differ) - 5} more" if len(differ) > 5 else "")
        return f"the installed rlprof-plugins ({package_dir}) is not this tree: {shown}; run `make env`"
    return None
