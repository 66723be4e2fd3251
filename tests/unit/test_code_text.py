"""Docstrings and comments say what the code does and why, for a newcomer reading it once.

Measurements, dates and issue numbers are history: they go stale in code and live in
docs/performance.md and benchmarks/results/. This test reads every docstring and comment of the
package (``rlprof_plugins/``, its ``patches/`` included) and fails on a number with a unit of time, size or
ratio, a date, or an issue number, unless it is a definition or an example named below with why.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

from tests.helpers.installed import REPO

MEASUREMENT = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?\s?(?:ms|us|µs|ns|s|sec|seconds|minutes|min|MB|GB|KB|MiB|GiB|KiB"
                         r"|%|x)(?![\w])")
MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.?"
DATE_OR_ISSUE = re.compile(r"\b20\d\d[-/.]\d\d(?:[-/.]\d\d)?\b"  # 2026-11, 2026-11-29, 2026/11/29
                           r"|\b\d\d?[-/.]\d\d?[-/.]20\d\d\b"  # 29.11.2026, 11/29/2026
                           r"|\b20\d\d(?:0[1-9]|1[0-2])(?:[0-2]\d|3[01])\b"  # 20261129
                           rf"|\b{MONTH} (?:\d\d?,? )?20\d\d\b|\b\d\d? {MONTH} 20\d\d\b"  # November 2026, 29 Nov 2026
                           r"|\b(?:in|since|until|as of|by|from|during) (?:early |late |mid-)?20\d\d\b"  # as of 2026
                           r"|\b(?:issue|PR) #?\d+\b", re.I)

# (file, the text matched): why it is no measurement
ALLOWED: dict[tuple[str, str], str] = {
    ("rlprof_plugins/backends/stack_sampler.py", "50 ms"): "an example of a native call a signal waits out",
    ("rlprof_plugins/metrics/flight.py", "5%"): "the definition of tokens that varied enough to fit a line",
    ("rlprof_plugins/report/render/charts.py", "4x"): "the definition of the axis top",
    ("rlprof_plugins/trace/analysis/python_stacks.py", "0.5%"): "the definition of a call path too small to show",
    ("rlprof_plugins/trace/analysis/step_numbers.py", "67%"): "arithmetic of an example: 5 against 3",
    ("rlprof_plugins/patches/vllm/engine_profile.py", "400s"): "HTTP status codes, not seconds",
    ("rlprof_plugins/backends/memory_history.py", "PR 3628"): "another project's finding the default rests on, cited",
}


def texts(path: Path):
    """(line, text) of every docstring and comment of one module."""
    source = path.read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield node.body[0].lineno, doc
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def test_no_measurement_date_or_issue_number_in_docstrings_and_comments():
    found, used = [], set()
    for folder in ("rlprof_plugins",):
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = str(path.relative_to(REPO))
            for line, text in texts(path):
                for pattern in (MEASUREMENT, DATE_OR_ISSUE):
                    for m in pattern.finditer(text):
                        if (rel, m.group(0)) in ALLOWED:
                            used.add((rel, m.group(0)))
                            continue
                        found.append(f"{rel}:{line}: {m.group(0)!r} in ...{text[max(0, m.start() - 60):m.end() + 20]!r}")
    assert not found, "history in code (move it to docs/performance.md or benchmarks/results/):\n" + "\n".join(found)
    assert not set(ALLOWED) - used, f"allowed but no longer found: {sorted(set(ALLOWED) - used)}"
