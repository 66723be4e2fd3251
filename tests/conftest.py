"""Each test folder runs in the environment of the engine it needs:
tests/sglang imports SGLang (.venv-sglang), tests/vllm imports vLLM (.venv-vllm);
``make test`` runs both environments.

Every test runs the installed wheel (tests/helpers/installed.py): a run whose
``rlprof_plugins`` is the source tree, or an install older than the tree,
stops before the first test and says to run ``make env``."""

import importlib.util
import os
import sys

import pytest

from tests.helpers.installed import check_installed

# Children (engines, scripts, nested pytest runs) started with the tree as working directory.
os.environ["PYTHONSAFEPATH"] = "1"

collect_ignore = []
if importlib.util.find_spec("sglang") is None:
    collect_ignore.append("sglang")
if importlib.util.find_spec("vllm") is None:
    collect_ignore.append("vllm")


def pytest_configure(config):
    problem = check_installed()
    if problem:
        pytest.exit(problem, returncode=4)


# CI's 25 minutes (docs/testing.md): the release contracts are interpreters busy with imports on one core
# each, and the unit tests use one core. Run the unit tests first, the contracts next, the engines after;
# the contracts start when collection ends, one beside the unit tests, two once the first contract test waits.
ORDER = ("tests/unit/", "tests/compat/")


def pytest_collection_modifyitems(session, config, items):
    items.sort(key=lambda item: next((k for k, folder in enumerate(ORDER) if item.nodeid.startswith(folder)),
                                     len(ORDER)))


def pytest_collection_finish(session):
    if any(item.nodeid.startswith("tests/compat/test_releases.py") for item in session.items):
        from tests.compat.test_releases import start_contract_runs

        start_contract_runs()


def pytest_sessionfinish(session, exitstatus):
    releases = sys.modules.get("tests.compat.test_releases")
    if releases is not None:
        releases.GATE.set()  # a session that ends before its contract tests lets their second lane go
