"""The package's layers, declared once, checked on every module's imports.

This test reads every module's imports (module level and inside functions: a lazy import is
still a dependency) by their package names and fails when one runs up a layer.
docs/architecture.md's layer table is generated from ``LAYERS`` (the last test
fails when it drifts), and so is its list of top-level entries. Each room's
``__init__`` states the rooms it may import (a ``May import:`` line); this
test reads those statements and holds them to the code in both directions.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from rlprof_plugins.patches.engines import REGISTRY
from tests.helpers.installed import REPO

P = "rlprof_plugins"
DOC = REPO / "docs" / "architecture.md"
# A module holds one concept, whatever its length; past this many lines a module must be named
# below with the reason it is one concept (a cap to notice growth, not a target to split at).
MAX_LINES = 500
LONG_MODULES: dict[str, str] = {}
MAX_ROOMS = 13  # packages at the top level (the engine patches included): each one concept

# Top to bottom. A module may import modules of its own layer and of the layers below, never
# above. A module belongs to the layer of the longest prefix that names it.
LAYERS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("command line", "the `rlprof` command: trace tools, doctor, compatibility table",
     (f"{P}.cli",)),
    ("step report", "`rlprof report`: steps, ranks, operators and memory on one page, JSON and CSV",
     (f"{P}.report",)),
    ("trainer client", "`RolloutProfiler` and the fleet commands: HTTP to every rollout server",
     (f"{P}.client",)),
    ("engine entry points", "what engines and verl load; the `.pth` bootstrap",
     (f"{P}.entry_points", f"{P}._bootstrap")),
    ("engine patches", "per engine, a module per patched area, and each engine's facts",
     (f"{P}.patches",)),
    ("sessions", "when to record: the workers' controller, the API server's recorder, the protocol",
     (f"{P}.session",)),
    ("step logs read back", "what the engines logged beside their step folders, read by the report: step logs, "
                            "busy periods, flight dumps",
     (f"{P}.step_logs",)),
    ("step metrics", "in the engine's processes, every iteration timed into its RL step: the record, the log, the "
                     "series; the flight recorder",
     (f"{P}.metrics",)),
    ("configuration and requests", "the keys, the launch configuration, one start request",
     (f"{P}.config",)),
    ("step sources", "which global step a request records into",
     (f"{P}.step_sources",)),
    ("backends", "how to record: torch.profiler, torch_npu, Nsight Systems' ranges",
     (f"{P}.backends",)),
    ("output store", "folders, manifest, a step folder's trace files, writers' processes, retention",
     (f"{P}.store",)),
    ("trace tools", "read, write, name, merge, split, stitch, check traces",
     (f"{P}.trace",)),
    ("base modules", "the vocabularies every layer speaks (errors, stages), atomic writes, the logger, the switches, work in "
     "other processes, the version",
     (f"{P}.errors", f"{P}.stages", f"{P}.atomic_files", f"{P}._log", f"{P}._env", f"{P}._child", f"{P}._parallel",
      f"{P}._progress", f"{P}._command", P)),
)
# What may import an engine: the patches (lazily, inside the patched process) and nothing else.
# The registry's folders (torch_npu is a backend's recorder, not an engine).
ENGINES = tuple(e.folder for e in REGISTRY)
PATCHES = f"{P}.patches"


def stated_floors() -> tuple[str, ...]:
    """Inside patches/, top to bottom, as ``patches/__init__`` states them: a module may import its own
    floor and the floors below."""
    doc = ast.get_docstring(ast.parse((REPO / P / "patches" / "__init__.py").read_text())) or ""
    found = re.search(r"^Floors inside, top to bottom[^:]*\):\s*(.*?)\.\s*$", doc, re.M | re.S)
    assert found, "patches/__init__.py does not state its floors ('Floors inside, top to bottom ...')"
    return tuple(" ".join(f.split()) for f in found.group(1).split(";"))


PATCH_FLOORS = stated_floors()


def modules() -> dict[str, Path]:
    """Every module by its installed name: {name: file}."""
    out = {}
    for path in sorted((REPO / P).rglob("*.py")):
        parts = list(path.relative_to(REPO / P).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join([P, *parts])] = path
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


def test_no_module_is_longer_than_the_cap_unless_named_with_its_reason():
    known = modules()
    assert set(LONG_MODULES) <= set(known), set(LONG_MODULES) - set(known)
    long = {n: len(p.read_text().splitlines()) for n, p in known.items()}
    assert {n: k for n, k in long.items() if k > MAX_LINES and n not in LONG_MODULES} == {}
    assert not [n for n in LONG_MODULES if long[n] <= MAX_LINES], "LONG_MODULES names a module under the cap"


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
    rooms = [e for e in entries if (REPO / P / e).is_dir()]
    assert len(rooms) <= MAX_ROOMS, rooms
    for entry in entries:  # every room and public module is declared, with its layer
        layer_of(f"{P}.{entry}")
    ground = [e for e in entries if not (REPO / P / e).is_dir()]
    assert all(layer_of(f"{P}.{e}") == len(LAYERS) - 1 for e in ground), ground


# ---- what each room may import, stated in its __init__ --------------------------
GROUND = "the base modules"


def room_of(module: str) -> str:
    """The room a module belongs to: its top-level package, or ``the base modules``."""
    rest = module.removeprefix(P).lstrip(".").split(".")[0]
    if module == P or layer_of(module) == len(LAYERS) - 1:
        return GROUND
    return "entry_points" if rest == "_bootstrap" else rest


def rooms() -> dict[str, Path]:
    """Every room's face: {room: its __init__}."""
    return {e: REPO / P / e / "__init__.py" for e in top_level_entries() if (REPO / P / e).is_dir()}


def stated_imports(face: Path) -> set[str] | None:
    """The rooms a ``May import:`` line of the face's docstring names (None: no such line)."""
    doc = ast.get_docstring(ast.parse(face.read_text())) or ""
    found = re.search(r"^May import: (.*?)\.?$", doc, re.M)
    if not found:
        return None
    text = found.group(1)
    named = set(re.findall(r"`([a-z_]+)`", text))
    return named | ({GROUND} if GROUND in text else set())


def test_every_room_states_the_rooms_it_may_import_and_the_code_agrees():
    known, wrong = modules(), []
    used: dict[str, set[str]] = {}
    for name, path in known.items():
        for _, target in imports(name, path):
            found = resolve(target, known)
            if found and room_of(found) != room_of(name):
                used.setdefault(room_of(name), set()).add(room_of(found))
    for room, face in sorted(rooms().items()):
        stated = stated_imports(face)
        if stated is None:
            wrong.append(f"{face.relative_to(REPO)}: no 'May import:' line in its docstring")
            continue
        unknown = stated - set(rooms()) - {GROUND}
        above = {r for r in stated - unknown - {GROUND} if layer_of(f"{P}.{r}") <= layer_of(f"{P}.{room}")}
        if unknown or above:
            wrong.append(f"{room}: states {sorted(unknown)} (no such room) {sorted(above)} (not below it)")
        if used.get(room, set()) - stated:
            wrong.append(f"{room} imports {sorted(used[room] - stated)}, which its __init__ does not state")
        if stated - used.get(room, set()):
            wrong.append(f"{room} states {sorted(stated - used.get(room, set()))}, which it no longer imports")
    assert not wrong, "\n".join(wrong)


# ---- inside trace/ and report/: their rooms, each stating what it may import -----------
TRACE = f"{P}.trace"
INNER_ROOMS = {  # a room of rooms -> its rooms, top to bottom
    TRACE: ("rewrite", "analysis", "format"),
    f"{P}.report": ("render", "execute", "plan"),  # the report's stages: each reads only what comes before
}


def inner_room_of(package: str, module: str) -> str:
    """A module's room as a room of ``package`` sees it: a sibling room inside ``package``, else the top-level
    room."""
    if module.startswith(package + "."):
        return module.removeprefix(package + ".").split(".")[0]
    return room_of(module)


@pytest.mark.parametrize("package", list(INNER_ROOMS), ids=lambda p: p.removeprefix(P + "."))
def test_the_inner_rooms_state_what_they_import_and_import_only_below_them(package):
    """trace/ holds three rooms (the format, what traces say, traces rewritten), report/ three stages (plan,
    execute, render); each module lives in one; each room's ``__init__`` states the rooms it may import, held
    to the code in both directions, and a room imports only the rooms below it."""
    order = INNER_ROOMS[package]
    known, wrong = modules(), []
    loose = [n for n in known if n.startswith(package + ".") and inner_room_of(package, n) not in order]
    assert not loose, f"modules of {package} in none of its rooms: {loose}"
    used: dict[str, set[str]] = {room: set() for room in order}
    for name, path in known.items():
        if not name.startswith(package + "."):
            continue
        for _, target in imports(name, path):
            found = resolve(target, known)
            if found and found != package and inner_room_of(package, found) != inner_room_of(package, name):
                used[inner_room_of(package, name)].add(inner_room_of(package, found))
    where = package.removeprefix(P + ".")
    for room in order:
        stated = stated_imports(REPO / P / where / room / "__init__.py")
        if stated is None:
            wrong.append(f"{where}/{room}: no 'May import:' line in its docstring")
            continue
        above = {r for r in stated if r in order and order.index(r) <= order.index(room)}
        if above:
            wrong.append(f"{where}/{room} states {sorted(above)}, not below it")
        if used[room] - stated:
            wrong.append(f"{where}/{room} imports {sorted(used[room] - stated)}, which its __init__ does not state")
        if stated - used[room]:
            wrong.append(f"{where}/{room} states {sorted(stated - used[room])}, which it no longer imports")
    assert not wrong, "\n".join(wrong)


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


def test_patches_states_the_floors_this_test_holds_it_to():
    """``floor_of`` places every module by what it is; the floors it places them on are the ones
    ``patches/__init__`` states, in its order, and each engine folder's face points there."""
    assert len(PATCH_FLOORS) == 8 and PATCH_FLOORS[0] == "the package's face and its table" and \
        PATCH_FLOORS[-1] == "what every engine's patches share", PATCH_FLOORS
    for engine in ENGINES:
        doc = ast.get_docstring(ast.parse((REPO / P / "patches" / engine / "__init__.py").read_text())) or ""
        assert re.search(r"^May import: the floors below it that ``patches/__init__`` states", doc, re.M), engine


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
