"""A pytest plugin for the engine-agnostic core's runs on every Python the package claims (``noxfile.py``).

Those environments hold the wheel and the test tools, not torch or an engine: a test module that imports
torch, vLLM or SGLang (itself or through a helper) is reported as skipped, naming what it needs, instead of
failing to collect, and so are the modules ``RUN_TIME_NEEDS`` names, whose tests import or start one while
they run. Any other collection error still fails the run."""

from __future__ import annotations

import re

import pytest

ENGINE_MODULES = ("torch", "vllm", "sglang", "ray")
# test modules that need an engine environment while they run (torch in a test's body, an installed engine)
RUN_TIME_NEEDS = {
    "test_sglang_requests.py": "SGLang's request types",
    "test_python_stacks.py": "torch (a profiler session)",
    "test_selftest.py": "torch (the GPU kit's self-test)",
    "test_doctor.py": "an installed engine (rlprof doctor)",
    "test_multinode.py": "torch (a profiler session)",
    "test_cuda_backend.py": "torch (the cuda backend)",
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        need = RUN_TIME_NEEDS.get(item.path.name)
        if need:
            item.add_marker(pytest.mark.skip(reason=f"needs {need}: runs in make test"))


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
