"""Frontends that bypass the Python API server rlprof patches: declared per engine, said once per process.

vLLM's Rust frontend (``VLLM_USE_RUST_FRONTEND=1``), SGLang's gRPC mode and
SGLang's Rust server replace the process whose routes rlprof patches, while
the engine processes (EngineCore and workers, schedulers) still load the
plugin. Each engine's facts module declares its bypassing frontends
(``FRONTENDS``): how a user turns one on, the variable every engine process
can read to tell (SGLang's gRPC mode is a server argument: the launcher
patch sets ``RLPROF_SGLANG_GRPC_MODE`` for the schedulers it spawns), the
releases that have it, what still works and what does not. The entry points
warn once per process where one is in use; ``rlprof doctor`` lists them.
``PROFILE_ROUTES`` in the same facts module lists every file of the newest
tested release that names ``/start_profile``, with what it is, so that
``make compat-latest`` shows a new one (a new frontend) the day it ships.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Mapping

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from rlprof_plugins._log import warn_once


@dataclass(frozen=True)
class Frontend:
    name: str
    chosen_by: str  # what the user sets, as they would read it
    variable: str  # the environment variable every engine process reads to tell it is in use
    versions: str  # the releases that have it
    works: str  # what rlprof still does behind it
    lacks: str  # what it does not, and what to do instead
    marker: str = ""  # a string the release's own sources hold where it has this frontend (make compat-latest)

    def in_use(self, environ: Mapping[str, str] | None = None) -> bool:
        return truthy((os.environ if environ is None else environ).get(self.variable))

    def exists_in(self, version: str | None) -> bool:
        try:
            return version is not None and Version(version) in SpecifierSet(self.versions)
        except InvalidVersion:
            return False

    def warning(self, title: str) -> str:
        return (f"rlprof: {title} serves through {self.name} ({self.chosen_by}), whose requests never reach the "
                f"Python API server rlprof patches. Still works: {self.works}. Not available: {self.lacks}")


def truthy(value: str | None) -> bool:
    return (value or "").strip().lower() not in ("", "0", "false", "no", "off")


def warn_in_use(title: str, frontends: tuple[Frontend, ...], version_of: Callable[[], str | None],
                environ: Mapping[str, str] | None = None) -> list[Frontend]:
    """One warning per process for each frontend in use here; the ones in use."""
    found = [f for f in frontends if f.in_use(environ)]
    if found:
        version = version_of()
        for f in found:
            if version is None or f.exists_in(version) or not f.versions:
                warn_once(f"frontend:{f.variable}", "%s", f.warning(title))
    return found
