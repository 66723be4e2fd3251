"""Import every module of the source tree from an installed copy of the package; print what fails.

    python -S import_every_module.py TARGET SITE [MODULE ...]

Run with ``-S`` (no site processing: the environment's own install, and the
``rlprof_plugins.pth`` that imports it at start-up, stay out), ``TARGET``
first on the path (where the wheel was installed) and ``SITE`` (the
environment's site-packages, for ``packaging`` and ``wrapt``) after it. A
module is wrong when its import fails or when it comes from anywhere but
``TARGET``. Prints one JSON object: {"imported": n, "problems": {module: why}}.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path


def main(target: str, site: str, modules: list[str]) -> dict:
    sys.path.insert(0, target)
    sys.path.append(site)
    root = Path(target).resolve()
    problems = {}
    for name in modules:
        try:
            module = importlib.import_module(name)
        except Exception as e:
            problems[name] = f"{type(e).__name__}: {e}"
            continue
        where = Path(module.__file__).resolve()
        if not where.is_relative_to(root):
            problems[name] = f"imported from {where}, not from the installed wheel"
    return {"imported": len(modules) - len(problems), "problems": problems}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], sys.argv[3:])))
