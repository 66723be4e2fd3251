"""The engines rlprof patches, each with its facts module (``<engine>/facts.py``).

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
- ``version()``: the installed release, or None.

``shapes`` (the newest tested release), ``rlprof_plugins.cli.compatibility`` (the
compatibility table), ``rlprof doctor`` and the entry points read them here,
by engine name; none writes a bound of its own. vllm-ascend is a platform
plugin of vLLM with no tested-release table of its own (docs/npu.md).

Trainers (verl) drive an engine in-process; their facts module
(``<trainer>/facts.py``) declares the same range and tested-release names
(the shape rule reads them through ``FACTS``) and no engine-only ones.
"""

from __future__ import annotations

from types import ModuleType

from .sglang import facts as sglang
from .vllm import facts as vllm
from .verl import facts as verl

# Engines with tested releases, in the order the docs show them.
ENGINES: dict[str, ModuleType] = {vllm.NAME: vllm, sglang.NAME: sglang}
TRAINERS: dict[str, ModuleType] = {verl.NAME: verl}
# Every name a Patch.engine may hold that has tested releases.
FACTS: dict[str, ModuleType] = {**ENGINES, **TRAINERS}
