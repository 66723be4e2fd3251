"""The torch_npu stand-in mirrors the real API that rlprof's backend calls.

Parses torch_npu 2.14.0's own Python sources (from its wheel; importing them
needs CANN) and compares, for every function and class the backend uses:
parameter names, order and kinds, the names exported by
``torch_npu.profiler``, and the constants' names and values.
"""

from __future__ import annotations

import ast
import inspect
import zipfile

import pytest

from tests.npu.sources import torch_npu_wheel

# (module in the wheel, qualified name) the backend or rlprof's analysis calls
CALLED = [
    ("torch_npu/profiler/profiler.py", "profile.__init__"),
    ("torch_npu/profiler/profiler.py", "profile.start"),
    ("torch_npu/profiler/profiler.py", "profile.stop"),
    ("torch_npu/profiler/profiler.py", "_KinetoProfile.add_metadata_json"),
    ("torch_npu/profiler/profiler.py", "tensorboard_trace_handler"),
    ("torch_npu/profiler/profiler.py", "analyse"),
    ("torch_npu/profiler/experimental_config.py", "_ExperimentalConfig.__init__"),
    ("torch_npu/profiler/scheduler.py", "Schedule.__init__"),
]
CONSTANTS = ["ProfilerLevel", "AiCMetrics", "ExportType"]


@pytest.fixture(scope="module")
def real_sources() -> dict[str, ast.Module]:
    with zipfile.ZipFile(torch_npu_wheel()) as wheel:
        names = {n for n, _ in CALLED} | {"torch_npu/profiler/__init__.py",
                                          "torch_npu/profiler/analysis/prof_common_func/_constant.py"}
        return {n: ast.parse(wheel.read(n).decode()) for n in names}


def _find(tree: ast.Module, qualname: str) -> ast.FunctionDef:
    node: ast.AST = tree
    for part in qualname.split("."):
        node = next(n for n in ast.iter_child_nodes(node)
                    if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part)
    return node


def _params(fn: ast.FunctionDef) -> list[tuple[str, str]]:
    a = fn.args
    out = [(p.arg, "positional") for p in a.posonlyargs + a.args]
    out += [(a.vararg.arg, "*")] if a.vararg else []
    out += [(p.arg, "keyword") for p in a.kwonlyargs]
    out += [(a.kwarg.arg, "**")] if a.kwarg else []
    return out


def _standin_params(obj) -> list[tuple[str, str]]:
    kinds = {inspect.Parameter.POSITIONAL_ONLY: "positional", inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional",
             inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.KEYWORD_ONLY: "keyword",
             inspect.Parameter.VAR_KEYWORD: "**"}
    return [(p.name, kinds[p.kind]) for p in inspect.signature(obj).parameters.values()]


@pytest.mark.parametrize("module,qualname", CALLED, ids=[q for _, q in CALLED])
def test_signatures_match(torch_npu, real_sources, module, qualname):
    import importlib

    standin_module = importlib.import_module(module[:-3].replace("/", "."))
    obj = standin_module
    for part in qualname.split("."):
        obj = getattr(obj, part)
    assert _standin_params(obj) == _params(_find(real_sources[module], qualname))


def test_exported_names_match(torch_npu, real_sources):
    tree = real_sources["torch_npu/profiler/__init__.py"]
    real_all = next(ast.literal_eval(n.value) for n in tree.body
                    if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "__all__")
    assert sorted(torch_npu.profiler.__all__) == sorted(real_all)
    for name in real_all:
        assert hasattr(torch_npu.profiler, name), name


def test_constants_match(torch_npu, real_sources):
    constant = _find(real_sources["torch_npu/profiler/analysis/prof_common_func/_constant.py"], "Constant")
    values = {t.id: ast.literal_eval(n.value) for n in constant.body if isinstance(n, ast.Assign)
              for t in n.targets if isinstance(t, ast.Name) and isinstance(n.value, ast.Constant)}
    tree = real_sources["torch_npu/profiler/experimental_config.py"]
    for cls in CONSTANTS:
        real = {n.targets[0].id: values[n.value.attr] for n in _find(tree, cls).body if isinstance(n, ast.Assign)}
        mine = {k: v for k, v in vars(getattr(torch_npu.profiler, cls)).items() if not k.startswith("_")}
        assert mine == real, cls
