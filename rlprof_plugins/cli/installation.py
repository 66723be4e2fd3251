"""Whether the installed package is whole: the import the engine plugins make, tried.

Every entry point (``entry_points/``) imports the patch registry
(``rlprof_plugins.patches``) and its engines' patch modules when the engine calls it; a module missing from
the install (a wheel built without a package) makes that import fail in each
engine process, which then logs "plugin not loaded" and serves without
rlprof. ``rlprof doctor`` asks this module first, so it names the missing
module instead of failing on the same import itself. Imports nothing of the
registry at module level for that reason.
"""

from __future__ import annotations

import importlib
from dataclasses import asdict, dataclass
from pathlib import Path

REGISTRY = "rlprof_plugins.patches"


@dataclass
class Installation:
    location: str
    ok: bool
    error: str = ""  # "ModuleNotFoundError: No module named 'rlprof_plugins.session'"
    missing_module: str | None = None  # the module the import could not find

    def to_json(self) -> dict:
        return asdict(self)

    def render(self) -> str:
        if self.ok:
            return f"rlprof-plugins at {self.location}: complete (the engine plugins import)"
        missing = f" (missing: {self.missing_module})" if self.missing_module else ""
        return (f"rlprof-plugins at {self.location} is INCOMPLETE{missing}: importing its engine patches fails with "
                f"{self.error}. No engine loads the plugin here (each logs 'plugin not loaded'). Reinstall it: "
                "pip install --force-reinstall rlprof-plugins")


def check() -> Installation:
    """Import the patch registry and every patch module, as the entry points do; never raises."""
    location = str(Path(__file__).resolve().parents[1])  # the rlprof_plugins package
    try:
        importlib.import_module(REGISTRY).all_patches()
    except ImportError as e:
        return Installation(location, False, f"{type(e).__name__}: {e}", e.name)
    except Exception as e:  # a module that is there but broken
        return Installation(location, False, f"{type(e).__name__}: {e}")
    return Installation(location, True)
