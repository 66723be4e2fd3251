"""Nothing rlprof ships forks the process it runs in.

The package runs inside engine processes: many threads, a GPU context, NCCL communicators. A ``fork`` of such a
process copies one thread into a child whose locks may be held by threads that no longer exist there, which
engine maintainers do not accept. Work that must leave the process starts a fresh interpreter (``spawn``, a
subprocess). This test reads every module of the package and of its patches and fails on any way of forking.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers.installed import REPO

FORKING_CALLS = {"fork", "forkpty", "fork_exec"}
FORKING_CONTEXTS = {"fork", "forkserver"}  # multiprocessing's start methods that fork this process


def forks(path: Path) -> list[str]:
    """Where one module forks (``name:line: call``): ``os.fork()`` and its kin, or a multiprocessing start method
    that forks."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in FORKING_CALLS:
                found.append(f"{path.name}:{node.lineno}: {name}()")
            if name in ("get_context", "set_start_method") and any(
                    isinstance(a, ast.Constant) and a.value in FORKING_CONTEXTS for a in node.args):
                found.append(f"{path.name}:{node.lineno}: {name}({node.args[0].value!r})")
    return found


def test_no_module_of_the_package_forks_its_process():
    modules = sorted((REPO / "rlprof_plugins").rglob("*.py"))
    assert len(modules) > 100, modules  # the whole package was read
    assert [f for path in modules for f in forks(path)] == []


def test_the_check_finds_each_way_of_forking(tmp_path):
    module = tmp_path / "forking.py"
    module.write_text("import os, multiprocessing as mp\n"
                      "os.fork()\nfrom os import forkpty\nforkpty()\n"
                      "mp.get_context('fork')\nmp.set_start_method('forkserver')\nmp.get_context('spawn')\n")
    assert [f.split(": ", 1)[1] for f in forks(module)] == [
        "fork()", "forkpty()", "get_context('fork')", "set_start_method('forkserver')"]
