"""Each test folder runs in the environment of the engine it needs:
tests/sglang imports SGLang (.venv-sglang), tests/vllm imports vLLM (.venv-vllm);
``make test`` runs both environments.

Every test runs the installed wheel (tests/helpers/installed.py): a run whose
``rlprof_plugins`` is the source tree, or an install older than the tree,
stops before the first test and says to run ``make env``."""

import importlib.util
import os
from pathlib import Path

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
