"""Trace work in a child process: one function and its arguments, its errors surfaced.

Stitching, stage splitting, merging and torch_npu's analysis are per-event
Python (or a library's own long analysis); run inside an engine process they
would hold its GIL for seconds. ``run_in_child`` runs ``module:function``
with JSON arguments in a fresh interpreter (``python -m
rlprof_plugins._child``, the spec on stdin) and returns the function's
JSON answer; a failure raises ``ChildFailed`` naming the work and the child's
own error (its exception type and message, not a bare exit status). Every
caller that leaves the engine process comes through here, so none runs the
command line to do it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ERROR_TAIL = 2000  # characters of the child's stderr an error keeps


BASE_SECONDS = 300.0  # a child working on files gets this long, and ``SECONDS_PER_MB`` more for each megabyte
SECONDS_PER_MB = 2.0


def seconds_for(*paths: Path | str) -> float:
    """How long a child may take over ``paths``: every wait ends, so a child that hangs fails with its
    work named instead of holding up the session that waits for it."""
    size = 0
    for path in paths:
        try:
            size += os.path.getsize(path)
        except OSError:
            continue
    return BASE_SECONDS + SECONDS_PER_MB * size / 1e6


class ChildFailed(RuntimeError):
    """The child process failed: what it was doing, its exit status and its own error."""


def _plain(value: Any) -> Any:
    return str(value) if isinstance(value, Path) else value


def run_in_child(target: str, *args: Any, what: str | None = None, timeout: float | None = None,
                 **kwargs: Any) -> Any:
    """``target`` (``"package.module:function"``) called with ``args``/``kwargs`` (JSON values; paths
    become strings) in a fresh interpreter; its return value (JSON) comes back."""
    spec = json.dumps({"target": target, "args": args, "kwargs": kwargs}, default=_plain)
    what = what or target.rsplit(":", 1)[-1].replace("_", " ")
    try:
        proc = subprocess.run([sys.executable, "-m", __name__], input=spec, capture_output=True, text=True,
                              timeout=timeout, env={**os.environ, "PYTHONSAFEPATH": "1"})
    except subprocess.TimeoutExpired:
        raise ChildFailed(f"{what} did not finish within {timeout:g} s") from None
    if proc.returncode != 0:
        raise ChildFailed(f"{what} failed ({proc.returncode}): {proc.stderr.strip()[-ERROR_TAIL:]}")
    lines = proc.stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines else None


def main() -> int:
    import importlib

    spec = json.loads(sys.stdin.read())
    module, _, name = spec["target"].partition(":")
    try:
        result = getattr(importlib.import_module(module), name)(*spec["args"], **spec["kwargs"])
    except Exception as e:  # the parent's error says this, not a traceback's last line alone
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(result, default=_plain))
    return 0


if __name__ == "__main__":
    sys.exit(main())
