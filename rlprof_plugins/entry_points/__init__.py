"""Per-engine entry points: thin, they only install the patches on import.

May import: `patches` and the base modules.
"""

from __future__ import annotations

import os
from .. import __version__
from .._env import on
from .._log import logger

_installed: set[str] = set()


def disabled() -> bool:
    """``RLPROF_DISABLE=1`` turns every entry point off."""
    return on("RLPROF_DISABLE")


def install_group(group: str) -> None:
    """Register a post-import hook for each patch of every engine the registry
    lists for the entry-point ``group``, once per process, and say which of
    each engine's bypassing frontends is in use here; never raises (a plugin
    must not stop the engine)."""
    if group in _installed or disabled():
        return
    _installed.add(group)
    try:
        from ..patches.engines import in_group
    except Exception as e:
        _not_loaded(group, e)
        return
    for engine in in_group(group):
        _install(engine)


def _install(engine) -> None:
    title = getattr(engine.facts, "TITLE", engine.name)
    try:
        from ..patches.base import install_on_import
        from ..patches.bypassing_frontends import warn_in_use

        patches = engine.patches()
        for patch in patches:
            siblings = tuple(q for q in patches if q is not patch and q.area_name == patch.area_name)
            install_on_import(patch, engine.facts, siblings)
        frontends = getattr(engine.facts, "FRONTENDS", ())
        if frontends:
            warn_in_use(title, frontends, engine.facts.version)
        # Which install this process runs: the first thing to check when a plugin seems absent.
        logger.info("rlprof: %s plugin %s loaded from %s (%d patches, each applied when its module is imported)",
                    title, __version__, os.path.dirname(os.path.dirname(os.path.abspath(__file__))), len(patches))
    except Exception as e:
        _not_loaded(title, e)


def _not_loaded(what: str, e: Exception) -> None:
    ours = isinstance(e, ImportError) and (e.name or "").startswith("rlprof_plugins")
    logger.warning("rlprof: %s plugin not loaded: %s: %s%s", what, type(e).__name__, e,
                   "; the installed rlprof-plugins is incomplete (reinstall it; `rlprof doctor` names what is "
                   "missing)" if ours else "")
