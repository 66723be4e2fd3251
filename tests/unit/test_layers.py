"""The package's layers, declared once, checked on every module's imports.

Tools that read imports by file path cannot follow setup.py's mapping of the
top-level ``patches/`` folder onto ``rlprof_plugins.patches``; this test reads
every module's imports (module level and inside functions: a lazy import is
still a dependency) by their package names and fails when one runs up a layer.
docs/architecture.md's layer table is generated from ``LAYERS`` (the last test
fails when it drifts), and so is its list of top-level entries.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from rlprof_plugins.patches.engines import REGISTRY
from tests.helpers.installed import REPO

P = "rlprof_plugins"
DOC = REPO / "docs" / "architecture.md"
MAX_LINES = 300
MAX_TOP_LEVEL = 10

# Top to bottom. A module may import modules of its own layer and of the layers below, never
# above. A module belongs to the layer of the longest prefix that names it.
LAYERS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("command line", "the `rlprof` command: trace tools, doctor, compatibility table",
     (f"{P}.cli",)),
    ("trainer client", "`RolloutProfiler` and the fleet commands: HTTP to every rollout server",
     (f"{P}.client",)),
    ("engine entry points", "what engines and verl load; the `.pth` bootstrap",
     (f"{P}.entry_points", f"{P}._bootstrap")),
    ("engine patches", "per engine, a module per patched area, and each engine's facts",
     (f"{P}.patches",)),
    ("sessions", "when to record: the workers' controller, the API server's recorder, the protocol",
     (f"{P}.session",)),
    ("configuration and requests", "the keys, the launch configuration, one start request",
     (f"{P}.config",)),
    ("step sources", "which global step a request records into",
     (f"{P}.steps",)),
    ("backends", "how to record: torch.profiler, torch_npu",
     (f"{P}.backends",)),
    ("trace tools", "read, write, name, merge, split, stitch, summarise, check traces",
     (f"{P}.trace",)),
    ("output store", "folders, manifest, writers' processes, retention",
     (f"{P}.store",)),
    ("ground", "errors every layer raises, the logger, the switches, the version",
     (f"{P}.errors", f"{P}._log", f"{P}._env", P)),
)
# What may import an engine: the patches (lazily, inside the patched process) and nothing else.
# The registry's folders (torch_npu is a backend's recorder, not an engine).
ENGINES = tuple(e.folder for e in REGISTRY)
PATCHES = f"{P}.patches"
# Inside patches/, top to bottom: a module may import its own floor and the floors below.
PATCH_FLOORS = ("the package's face and its table", "the registry", "an engine's package", "patch modules",
                "helpers", "facts", "the Patch declaration", "what every engine's patches share")


def modules() -> dict[str, Path]:
    """Every module by its installed name: {name: file}."""
    out = {}
    for folder, package in ((REPO / P, P), (REPO / "patches", f"{P}.patches")):
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([package, *parts])] = path
    return out


def imports(name: str, path: Path) -> list[tuple[int, str]]:
    """(line, imported module or name's module) for every import in the file."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                found.append((node.lineno, f"{target}.{alias.name}"))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
    return found


def resolve(target: str, known: dict[str, Path]) -> str | None:
    """The module ``target`` names (it may end in a function or class name)."""
    while target and target not in known:
        target = target.rpartition(".")[0]
    return target or None


def layer_of(module: str) -> int:
    best, rank = -1, None
    for i, (_, _, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), i
    assert rank is not None, f"{module} is in no layer: declare it in LAYERS"
    return rank


def test_no_module_imports_from_a_layer_above_it():
    known = modules()
    upward = []
    for name, path in known.items():
        for line, target in imports(name, path):
            found = resolve(target, known)
            if found and layer_of(found) < layer_of(name):
                upward.append(f"{path.relative_to(REPO)}:{line} ({LAYERS[layer_of(name)][0]}) imports {found} "
                              f"({LAYERS[layer_of(found)][0]})")
    assert not upward, "imports running up a layer:\n" + "\n".join(upward)


def test_no_import_circle_between_modules():
    """Module-level imports only: an import inside a function runs after both modules loaded."""
    known = modules()
    edges = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text())
        top = ast.Module(body=[n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom, ast.If, ast.Try))],
                         type_ignores=[])
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        targets = set()
        for node in ast.walk(top):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else [])) if node.level else node.module
                for alias in node.names:
                    found = resolve(f"{target}.{alias.name}", known)
                    if found and found != name:
                        targets.add(found)
        edges[name] = targets
    state, cycle = {}, []

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(edges.get(node, ())):
            # a package's __init__ importing its own submodules is how a package shows its face
            if nxt.startswith(node + "."):
                continue
            if state.get(nxt) == "open":
                cycle.append(stack[stack.index(nxt):] + [nxt] if nxt in stack else [node, nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    assert not cycle, cycle


def test_no_module_is_longer_than_300_lines():
    long = {n: len(p.read_text().splitlines()) for n, p in modules().items()}
    assert {n: k for n, k in long.items() if k > MAX_LINES} == {}


def test_the_core_never_imports_an_engine():
    engine_imports = []
    for name, path in modules().items():
        if name.startswith(f"{P}.patches"):
            continue
        for line, target in imports(name, path):
            if target.split(".")[0] in ENGINES:
                engine_imports.append(f"{path.relative_to(REPO)}:{line} imports {target}")
    assert not engine_imports


def top_level_entries() -> list[str]:
    """The public entries of ``rlprof_plugins/`` (private ``_modules`` and dunder files aside)."""
    return sorted(p.name.removesuffix(".py") for p in (REPO / P).iterdir()
                  if not p.name.startswith("_") and (p.suffix == ".py" or (p / "__init__.py").exists()))


def test_the_top_level_reads_as_the_architecture():
    entries = top_level_entries()
    assert len(entries) <= MAX_TOP_LEVEL, entries
    for entry in entries:  # every room is declared, with its layer
        layer_of(f"{P}.{entry}")


def layer_table() -> str:
    lines = ["| layer (top to bottom) | holds | packages and modules |", "| --- | --- | --- |"]
    for title, holds, prefixes in LAYERS:
        names = ", ".join(f"`{p.removeprefix(P + '.') if p != P else P + '/__init__'}`" for p in prefixes)
        lines.append(f"| {title} | {holds} | {names} |")
    return "\n".join(lines) + "\n"


def test_the_architecture_doc_shows_these_layers():
    text = DOC.read_text()
    found = re.search(r"<!-- layers: generated from tests/unit/test_layers.py -->\n(.*?)<!-- /layers -->", text, re.S)
    assert found, "docs/architecture.md lacks the generated layer table"
    assert found.group(1) == layer_table(), "docs/architecture.md's layer table drifted from LAYERS:\n" + layer_table()


# ---- inside patches/ -------------------------------------------------------------
def patch_modules() -> set[str]:
    return {f"{PATCHES}.{e.folder}.{m}" for e in REGISTRY
            for m in __import__(f"{PATCHES}.{e.folder}", fromlist=["PATCH_MODULES"]).PATCH_MODULES}


def floor_of(module: str, patch_mods: set[str]) -> int:
    """Its floor inside patches/ (0 is the top), from what it is, not from a list to keep."""
    rest = module.removeprefix(PATCHES).lstrip(".").split(".")
    if rest in ([""], ["__main__"]):
        return 0
    if rest == ["engines"]:
        return 1
    if len(rest) == 1 and rest[0] in ENGINES:
        return 2
    if module in patch_mods:
        return 3
    if len(rest) == 2:
        return 5 if rest[1] == "facts" else 4
    return 6 if rest == ["base"] else 7


def test_inside_patches_no_import_runs_up_a_floor_and_no_patch_module_imports_another():
    known, patch_mods = modules(), patch_modules()
    assert patch_mods <= set(known), "PATCH_MODULES names a module that does not exist"
    wrong = []
    for name, path in known.items():
        if not name.startswith(PATCHES):
            continue
        for line, target in imports(name, path):
            found = resolve(target, known)
            if not found or not found.startswith(PATCHES) or found == name:
                continue
            where = f"{path.relative_to(REPO)}:{line}"
            mine, theirs = floor_of(name, patch_mods), floor_of(found, patch_mods)
            if theirs < mine:
                wrong.append(f"{where} ({PATCH_FLOORS[mine]}) imports {found} ({PATCH_FLOORS[theirs]})")
            elif name in patch_mods and found in patch_mods:
                wrong.append(f"{where}: patch module {name} imports patch module {found}")
    assert not wrong, "inside patches/:\n" + "\n".join(wrong)


def test_a_patch_module_declares_patches_and_a_helper_none():
    """What tells them apart is declared (``PATCH_MODULES``), and the code agrees."""
    known, patch_mods = modules(), patch_modules()
    for name, path in known.items():
        parts = name.removeprefix(PATCHES).lstrip(".").split(".")
        if not name.startswith(PATCHES + ".") or len(parts) != 2 or parts[0] not in ENGINES:
            continue
        declares = any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "PATCHES" for t in n.targets)
                       for n in ast.parse(path.read_text()).body)
        assert declares == (name in patch_mods), f"{name}: {'a helper declaring' if declares else 'a patch module without'} PATCHES"
        first = ast.get_docstring(ast.parse(path.read_text())) or ""
        if parts[1] != "facts":  # facts modules say what they hold in their own words
            assert first.startswith("Patch module (" if name in patch_mods else "Helper:"), f"{name}: {first[:60]!r}"


# ---- where a module's tests are ------------------------------------------------
def test_every_module_has_tests_the_index_finds():
    """``python -m tests.index MODULE`` names at least one test file for each module."""
    from tests.index import REACHED_THROUGH, tests_of

    known = modules()
    assert set(REACHED_THROUGH) <= set(known), set(REACHED_THROUGH) - set(known)
    assert not [t for ts in REACHED_THROUGH.values() for t in ts if not (REPO / t).is_file()]
    faces = {n for n, p in known.items() if p.name == "__init__.py"}
    untested = [n for n in sorted(set(known) - faces) if not tests_of(n)]
    assert not untested, "modules no test file imports or is indexed for (tests/index.py):\n" + "\n".join(untested)
