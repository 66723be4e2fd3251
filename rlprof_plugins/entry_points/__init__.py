"""Per-engine entry points: thin, they only install the patches on import."""

from __future__ import annotations

import os
from typing import Callable

from .. import __version__
from .._env import on
from .._log import logger

_installed: set[str] = set()


def disabled() -> bool:
    """``RLPROF_DISABLE=1`` turns every entry point off."""
    return on("RLPROF_DISABLE")


def install_patches(engine: str, group: str, version_of: Callable[[], str | None], frontends: tuple = ()) -> None:
    """Register a post-import hook for each patch in ``patches.<group>``,
    once per process, and say which of the engine's ``frontends`` (those that
    bypass the patched API server) is in use here; never raises (a plugin
    must not stop the engine)."""
    if group in _installed or disabled():
        return
    _installed.add(group)
    try:
        from .. import patches
        from ..patches.base import install_on_import

        group_patches = getattr(patches, group)
        for patch in group_patches:
            siblings = tuple(q for q in group_patches if q is not patch and q.area_name == patch.area_name)
            install_on_import(patch, version_of, siblings)
        if frontends:
            from ..patches.frontends import warn_in_use

            warn_in_use(engine, frontends, version_of)
        # Which install this process runs: the first thing to check when a plugin seems absent.
        logger.info("rlprof: %s plugin %s loaded from %s (%d patches, each applied when its module is imported)",
                    engine, __version__, os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    len(group_patches))
    except Exception as e:
        ours = isinstance(e, ImportError) and (e.name or "").startswith("rlprof_plugins")
        logger.warning("rlprof: %s plugin not loaded: %s: %s%s", engine, type(e).__name__, e,
                       "; the installed rlprof-plugins is incomplete (reinstall it; `rlprof doctor` names what is "
                       "missing)" if ours else "")
