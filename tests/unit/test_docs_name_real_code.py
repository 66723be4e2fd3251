"""The docs name only code that exists.

docs/architecture.md and CONTRIBUTING.md name modules by path (``session/recording.py``,
``rlprof_plugins/_child.py:run_in_child``) and by dotted name (``exporter.report``,
``metrics.record.StepRecord``, ``Recording.of_frontend``). Every such name in backticks that starts with one of the package's
modules or classes must resolve in the tree: the file exists, and the names after it are defined
there (a function, a class, a constant, an import, a method or an attribute a method sets). Names
that start with something not the package's own (``torch.profiler``, ``ProfileReq.profile_id``)
are other projects' and are left alone, as are file names of outputs (``manifest.json``).

The user pages (README.md and the rest of docs/) also name other projects' files (verl's
``vllm_async_server.py``, SGLang's ``tools/``) and the keys of JSON outputs (``analysis.nodes``),
so there only the names that are surely ours are held to the same rule: a path under one of the
tree's own folders (``patches/sglang/control.py:node_of``) or a dotted name from the package's top
(``rlprof_plugins.store.servers``).
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

from tests.helpers.installed import REPO

DOCS = (REPO / "docs" / "architecture.md", REPO / "CONTRIBUTING.md")
USER_PAGES = tuple(sorted(set((REPO / "docs").glob("*.md")) - set(DOCS))) + (REPO / "README.md",)
SOURCE_ROOTS = ("rlprof_plugins", "tests", "benchmarks", "examples")
# names that end like these are files the tools write or read, not code
DATA_ENDINGS = (".json", ".jsonl", ".gz", ".html", ".md", ".csv", ".txt", ".pickle", ".png", ".cfg", ".toml", ".pth",
                ".whl", ".log", ".c", ".so", ".yaml", ".json.gz", ".pt")
# names that start with an engine's own package are the engine's (``vllm.entrypoints.llm``, the entry-point
# group ``sglang.srt.plugins``) or a patch's declared name (``vllm.api_router.profile``); the docs name
# rlprof's engine modules by path (``patches/vllm/control.py``)
ENGINE_PACKAGES = ("vllm", "sglang", "verl", "vllm_ascend", "torch", "torch_npu")
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
DOTTED = re.compile(rf"^{IDENT}(?:\.{IDENT})+$")
PATH_NAME = re.compile(rf"^(?P<path>[\w./<>-]*\.py)(?::(?P<names>{IDENT}(?:\.{IDENT})*))?$")


@functools.lru_cache(maxsize=None)
def source_files() -> tuple[Path, ...]:
    return tuple(p for root in SOURCE_ROOTS for p in sorted((REPO / root).rglob("*.py")) if "__pycache__" not in p.parts)


def module_parts(path: Path) -> tuple[str, ...]:
    """A file's module name parts, as installed."""
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return tuple(parts)


@functools.lru_cache(maxsize=None)
def definitions(path: Path) -> dict[str, set[str]]:
    """``{name: its attributes}`` for every top-level name a module defines or imports; a class's
    attributes are its methods, class-level names and what its methods set on ``self``."""
    tree = ast.parse(path.read_text())
    out: dict[str, set[str]] = {}
    for node in tree.body:
        for name in _bound(node):
            out.setdefault(name, set())
        if isinstance(node, ast.ClassDef):
            attrs = out[node.name]
            for item in node.body:
                attrs.update(_bound(item))
            for sub in ast.walk(node):
                if isinstance(sub, (ast.Assign, ast.AnnAssign)):
                    for target in (sub.targets if isinstance(sub, ast.Assign) else [sub.target]):
                        for t in ast.walk(target):
                            if isinstance(t, ast.Attribute) and getattr(t.value, "id", None) == "self":
                                attrs.add(t.attr)
    return out


def _bound(node: ast.AST) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for target in node.targets for t in ast.walk(target) if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    if isinstance(node, (ast.If, ast.Try)):
        return [n for child in ast.iter_child_nodes(node) for n in _bound(child)]
    return []


@functools.lru_cache(maxsize=None)
def modules_by_parts() -> dict[tuple[str, ...], Path]:
    return {module_parts(p): p for p in source_files()}


@functools.lru_cache(maxsize=None)
def classes() -> dict[str, list[Path]]:
    out: dict[str, list[Path]] = {}
    for path in source_files():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                out.setdefault(node.name, []).append(path)
    return out


def modules_ending(parts: tuple[str, ...]) -> list[Path]:
    return [p for m, p in modules_by_parts().items() if m[-len(parts):] == parts]


def resolves_in(path: Path, names: list[str]) -> bool:
    """``names`` (``Class.method``, ``function``) defined in the module at ``path``; a name the module
    imports counts as defined (the module offers it)."""
    if not names:
        return True
    defined = definitions(path)
    if names[0] not in defined:
        # a submodule of a package's face
        sub = modules_by_parts().get(module_parts(path) + (names[0],))
        return sub is not None and resolves_in(sub, names[1:])
    return len(names) == 1 or names[1] in defined[names[0]] or not defined[names[0]] and len(names) == 2 and \
        _imported_module_has(path, names)


def _imported_module_has(path: Path, names: list[str]) -> bool:
    """``module.name`` where the module was imported under ``names[0]``: look the name up there."""
    for target in modules_ending((names[0],)):
        if resolves_in(target, names[1:]):
            return True
    return False


def problem_with(token: str) -> str | None:
    """Why a backticked name does not resolve (None: it does, or it is not the package's)."""
    if token.endswith(DATA_ENDINGS) and not token.endswith(".py"):
        return None
    m = PATH_NAME.match(token)
    if m:
        path = m.group("path").lstrip("./")
        parts = tuple(Path(path).with_suffix("").parts)
        if "<" in path:  # a pattern: ``rlprof_plugins/trace/<tool>.py``, ``patches/<engine>/facts.py``
            pattern = re.sub(r"<[^>]*>", "*", path)
            return None if any(any(REPO.glob(f"{root}/{pattern}")) or any(REPO.glob(pattern))
                               for root in (*SOURCE_ROOTS, "rlprof_plugins/patches")) else f"{token}: nothing matches"
        candidates = [p for p in source_files() if p.relative_to(REPO).with_suffix("").parts[-len(parts):] == parts]
        if not candidates:
            return f"{token}: no such file"
        names = m.group("names").split(".") if m.group("names") else []
        if not any(resolves_in(p, names) for p in candidates):
            return f"{token}: {'.'.join(names)} is not defined in {candidates[0].relative_to(REPO)}"
        return None
    if not DOTTED.match(token):
        return None
    parts = tuple(token.split("."))
    if parts[0] in ENGINE_PACKAGES:
        return None
    # the longest leading run of parts that is a module of ours (by its trailing name parts)
    for cut in range(len(parts), 0, -1):
        found = modules_ending(parts[:cut])
        if found:
            if any(resolves_in(p, list(parts[cut:])) for p in found):
                return None
            return f"{token}: {'.'.join(parts[cut:])} is not defined in {found[0].relative_to(REPO)}"
    if parts[0] in classes():
        if any(resolves_in(p, list(parts)) for p in classes()[parts[0]]):
            return None
        return f"{token}: {parts[0]} has no {'.'.join(parts[1:])}"
    return None  # another project's name


def surely_ours(token: str) -> bool:
    """A name only this tree can mean: a path that starts with one of its source folders or a folder of the
    package (``session/``, ``patches/vllm/``), or a dotted name from the package's top."""
    m = PATH_NAME.match(token)
    if m:
        first = Path(m.group("path").lstrip("./")).parts[0]
        return first in SOURCE_ROOTS or (REPO / "rlprof_plugins" / first).is_dir() or \
            (REPO / "rlprof_plugins" / "patches" / first).is_dir()
    return DOTTED.match(token) is not None and token.split(".")[0] in ("rlprof_plugins", "patches")


def backticked(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", text)


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.name)
def test_every_module_and_name_the_doc_gives_exists(doc):
    wrong = sorted({p for token in backticked(doc.read_text()) if (p := problem_with(token))})
    assert not wrong, f"{doc.relative_to(REPO)} names code that does not exist:\n" + "\n".join(wrong)


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda d: d.name)
def test_every_module_and_name_a_user_page_gives_of_ours_exists(page):
    wrong = sorted({p for token in backticked(page.read_text()) if surely_ours(token) and (p := problem_with(token))})
    assert not wrong, f"{page.relative_to(REPO)} names code that does not exist:\n" + "\n".join(wrong)


def test_a_user_page_is_held_to_the_names_that_are_ours():
    """A module named for a function it does not hold is caught on a user page; another project's file and
    a JSON key are not taken for ours."""
    assert surely_ours("patches/sglang/scheduler.py:node_of")
    assert problem_with("patches/sglang/scheduler.py:node_of")
    assert problem_with("patches/sglang/control.py:node_of") is None
    assert surely_ours("rlprof_plugins.store.servers.current") and problem_with("rlprof_plugins.store.servers.current") is None
    for theirs in ("tools/profile_rollout.py", "vllm_async_server.py", "analysis.nodes", "Engine.start_profile",
                   "torch_npu/npu/memory.py"):
        assert not surely_ours(theirs), theirs


def test_the_check_finds_names_that_are_gone():
    """The names issue 54 found stale are refused; real ones resolve."""
    assert problem_with("choice.py")
    assert problem_with("control.combine")
    assert problem_with("recording.Exporter")
    assert problem_with("trace/child.py:run_in_child")
    assert problem_with("session/recording.py:Recording.nothing_here")
    for real in ("session/recording.py", "rlprof_plugins/_child.py:run_in_child", "exporter.report",
                 "Recording.of_frontend", "store.manifest.locked", "metrics.record.StepRecord.decode",
                 "patches/vllm/worker_hooks.py:STEP_METRICS", "tests.index", "torch.profiler", "manifest.json"):
        assert problem_with(real) is None, (real, problem_with(real))
