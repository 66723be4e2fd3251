"""The registry: every engine (and trainer) rlprof patches, registered once.

A new engine is its folder (``patches/<engine>/``) plus one ``Engine`` line
in ``REGISTRY``. In the folder, a patch module is named in the ``__init__``'s
``PATCH_MODULES`` (the install order), declares ``PATCHES``, is named for the
engine module it patches and says in its docstring which process that runs
in (``Patch module (<process>): ...``). Every other module is a helper
(``Helper: ...``): it declares no patch; ``facts.py`` is the one that says
what the patches rely on in the engine. A patch module imports helpers and
the core, never another patch module; a helper never imports a patch module
(``tests/unit/test_layers.py``). The entry points install what the registry
lists for their plugin group, ``rlprof doctor --engine`` and the
compatibility table read their choices from it, and the layering test reads
its folders; ``tests/packaging`` checks setup.cfg's entry points against it.

Each facts module declares, once, what the patches beside it rely on:

- ``NAME``, ``TITLE``; ``ENTRY_POINTS``, the group the engine loads plugins
  from, and ``ALLOW_LIST_ENV``, the variable that can leave plugins out;
- ``FIRST``/``BELOW``/``VERSIONS``: the supported range, from the oldest
  release to just past the newest tested one (newer releases of the same
  major: the shape rule, ``shapes.py``), and the eras' ranges inside it;
- ``TESTED``: the releases the contract tests run against, unpacked from their
  wheels (tests/compat), each with its shapes in ``shape_records/``;
  ``CI_SUBSET``: those CI runs;
- ``HOW_TO_CONFIGURE``: per era, how profiling is configured (first match wins);
- ``CAPABILITIES``: what depends on the release itself rather than on a patch
  (name, releases that have it, what happens on the others), probed by the
  contract tests;
- ``FRONTENDS``: the servers that bypass the patched API server
  (``bypassing_frontends.py``);
- ``version()``: the installed release, or None.

vllm-ascend is a platform plugin of vLLM, installed by vLLM's entry point,
with no tested-release table of its own (docs/npu.md). Trainers (verl)
drive an engine in-process; their facts module declares the same range and
tested-release names and no engine-only ones.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

from .base import Patch
from .sglang import facts as sglang
from .verl import facts as verl
from .vllm import facts as vllm
from .vllm_ascend import facts as vllm_ascend


@dataclass(frozen=True)
class Engine:
    facts: ModuleType
    role: str  # "engine" (tested releases, a doctor report), "platform" (a plugin of one) or "trainer"
    plugin_group: str  # the entry-point group whose rlprof entry point installs these patches

    @property
    def name(self) -> str:  # what ``Patch.engine`` holds
        return self.facts.NAME

    @property
    def folder(self) -> str:  # patches/<folder>/
        return self.facts.__name__.rsplit(".", 2)[-2]

    @property
    def tested(self) -> tuple[str, ...]:
        return tuple(getattr(self.facts, "TESTED", ()))

    def patch_modules(self) -> list[ModuleType]:
        package = importlib.import_module(f"{__package__}.{self.folder}")
        return [importlib.import_module(f"{package.__name__}.{m}") for m in package.PATCH_MODULES]

    def patches(self) -> tuple[Patch, ...]:
        return tuple(p for m in self.patch_modules() for p in m.PATCHES)


# In the order the docs show them. One line per engine.
REGISTRY: tuple[Engine, ...] = (
    Engine(vllm, "engine", vllm.ENTRY_POINTS),
    Engine(vllm_ascend, "platform", vllm.ENTRY_POINTS),
    Engine(sglang, "engine", sglang.ENTRY_POINTS),
    Engine(verl, "trainer", verl.ENTRY_POINTS),
)
BY_NAME: dict[str, Engine] = {e.name: e for e in REGISTRY}
# Engines with tested releases; trainers; every name a Patch.engine may hold that has tested releases.
ENGINES: dict[str, ModuleType] = {e.name: e.facts for e in REGISTRY if e.role == "engine"}
TRAINERS: dict[str, ModuleType] = {e.name: e.facts for e in REGISTRY if e.role == "trainer"}
FACTS: dict[str, ModuleType] = {**ENGINES, **TRAINERS}


def in_group(group: str) -> tuple[Engine, ...]:
    """The engines whose patches the entry point of ``group`` installs."""
    return tuple(e for e in REGISTRY if e.plugin_group == group)


def tested_releases(engine: str) -> tuple[str, ...]:
    found = BY_NAME.get(engine)
    return found.tested if found is not None else ()
