"""Each test folder runs in the environment of the engine it needs:
tests/sglang imports SGLang (.venv-sglang), tests/vllm imports vLLM (.venv-vllm);
``make test`` runs both environments.

Every test runs the installed wheel (tests/helpers/installed.py): a run whose
``rlprof_plugins`` is the source tree, or an install older than the tree,
stops before the first test and says to run ``make env``."""

import importlib.util
import os

import pytest

from tests.helpers.gcs_emulator import GCS_LOOPBACK_ONLY
from tests.helpers.installed import check_installed

# Children (engines, scripts, nested pytest runs) started with the tree as working directory.
os.environ["PYTHONSAFEPATH"] = "1"
# Google's libraries look for a Compute Engine metadata server (a link-local address) and Google's own
# storage-control service when they look for credentials and a bucket's layout; the tests reach only the
# loopback. google-auth reads these once, at import, so they are set before any test imports it.
os.environ.update(GCS_LOOPBACK_ONLY)

collect_ignore = []
if importlib.util.find_spec("sglang") is None:
    collect_ignore.append("sglang")
if importlib.util.find_spec("vllm") is None:
    collect_ignore.append("vllm")


def pytest_configure(config):
    problem = check_installed()
    if problem:
        pytest.exit(problem, returncode=4)
