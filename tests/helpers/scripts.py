"""Test scripts that run an engine in a process of their own and print one ``RESULT {json}`` line.

(A script, not pytest's process: engines re-import ``__main__`` in their
children, and each engine has its own environment.)
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path


def script_result(cmd: list[str], *, env: dict, cwd: Path, timeout: float, check: bool = True) -> dict:
    """Run ``cmd`` and return its last ``RESULT`` line's JSON; ``check``: it must also exit 0."""
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    output = proc.stdout[-4000:] + proc.stderr[-4000:]
    if check:
        assert proc.returncode == 0, output
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, output
    return json.loads(lines[-1][len("RESULT "):])
