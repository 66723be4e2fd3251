"""The engine-agnostic core's unit tests on every Python the package claims (``python_requires``).

``nox`` (with ``uv`` making the environments where it is installed) builds the wheel once, installs it
with its ``test`` extra into one environment per Python, and runs ``tests/unit`` there. The engines' own
environments (``make env``) stay on the Python the engines pin; test modules that need torch or an engine
are reported skipped here (``tests/helpers/core_only.py``) and run in ``make test``. ``make test-pythons``
runs it; CI runs it beside ``make test``.
"""

from __future__ import annotations

import glob
from pathlib import Path

import nox

PYTHONS = ["3.10", "3.11", "3.12", "3.13"]
REPO = Path(__file__).resolve().parent
DIST = REPO / ".cache" / "dist-core"
# prometheus_client, which the engines bring, for the /metrics tests (the [test] extra brings the rest: pytest,
# requests, msgspec, zlib-ng, and playwright driving Debian's Chromium for the page tests)
TEST_TOOLS = ["prometheus_client"]

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_existing_virtualenvs = True


def wheel() -> str:
    (found,) = glob.glob(str(DIST / "*.whl"))
    return found


@nox.session(python=False)
def build(session: nox.Session) -> None:
    """The wheel from this tree (what the engine environments install too)."""
    session.run("rm", "-rf", str(DIST), external=True)
    session.run("python3", "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(DIST),
                str(REPO), external=True)
    session.run("rm", "-rf", str(REPO / "build"), *glob.glob(str(REPO / "*.egg-info")), external=True)


@nox.session(python=PYTHONS, requires=["build"])
def core(session: nox.Session) -> None:
    """``tests/unit`` against the installed wheel on this Python."""
    session.install(f"{wheel()}[test]", *TEST_TOOLS)
    session.install("--force-reinstall", "--no-deps", wheel())  # this tree's build, never an older one
    site = session.run("python", "-c", "import site; print(site.getsitepackages()[0])", silent=True).strip()
    Path(site, "rlprof-tests.pth").write_text(f"{REPO}\n")  # tests/ after site-packages: the wheel comes first
    # pytest's own script, never `python -m` (which puts the tree first on the path, ahead of the wheel)
    session.run("pytest", "tests/unit", "-p", "tests.helpers.core_only", "-p", "no:cacheprovider", "-q",
                *session.posargs, env={"PYTHONSAFEPATH": "1"})
