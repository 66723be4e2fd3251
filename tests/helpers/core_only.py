"""A pytest plugin for the engine-agnostic core's runs on every Python the package claims (``noxfile.py``).

Those environments hold the wheel and the test tools, not torch or an engine: a test module that imports
torch, vLLM or SGLang (itself or through a helper) is reported as skipped, naming what it needs, instead of
failing to collect. Any other collection error still fails the run."""

from __future__ import annotations

import re

import pytest

ENGINE_MODULES = ("torch", "vllm", "sglang", "ray")
_MISSING = re.compile(r"ModuleNotFoundError: No module named '(?P<name>[\w.]+)'")


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    found = _MISSING.search(str(report.longrepr))
    if found and found["name"].split(".")[0] in ENGINE_MODULES:
        report.outcome = "skipped"
        report.longrepr = (str(collector.path), 0, f"Skipped: needs {found['name']} (an engine environment)")
