"""What the docs show a command printing is what it prints.

A block in docs/*.md introduced by ``<!-- real output: CMD -->`` is a
```` ```text ```` block whose first line is ``$ CMD`` and the rest CMD's
output (its stdout: warnings of the engine it imports go to stderr). Each is run here with the installed ``rlprof`` (the wheel), in a
folder holding a copy of tests/fixtures (so ``tests/fixtures/...`` reads the
repo's real traces and nothing is written into the checkout), with
``COLUMNS=100`` (argparse wraps help to it). The paths of this machine are
written as a user's would read (``NEUTRAL``): the environment as ``/opt/venv``,
the checkout and the run's folder as ``/srv/project``. Blocks without the marker (timings, other machines, older
engines) are examples, not checked.
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"<!-- real output: (?P<cmd>.+?) -->\n```text\n(?P<block>.*?)\n```", re.S)


def neutral_paths(run_folder: Path) -> list[tuple[str, str]]:
    """``(this machine's path, what the docs show)``, the longest first so that a path inside another is
    written as its own."""
    pairs = [(sys.prefix, "/opt/venv"), (str(REPO), "/srv/project"), (str(run_folder), "/srv/project")]
    return sorted(pairs, key=lambda pair: len(pair[0]), reverse=True)


def documented() -> list[tuple[str, str, str]]:
    out = []
    for doc in sorted((REPO / "docs").glob("*.md")):
        for m in MARKER.finditer(doc.read_text()):
            out.append((doc.name, m["cmd"], m["block"]))
    return out


def test_the_docs_hold_checked_examples():
    names = {(doc, cmd.split()[1]) for doc, cmd, _ in documented()}
    assert {("cli.md", "--help"), ("cli.md", "summary"), ("doctor.md", "doctor"), ("report.md", "report"),
            ("report.md", "summary")} <= names, names


@pytest.mark.parametrize("doc, cmd, block", documented(), ids=lambda v: v if isinstance(v, str) and
                         v.endswith(".md") else None)
def test_documented_output_is_real(doc, cmd, block, tmp_path):
    shutil.copytree(REPO / "tests" / "fixtures", tmp_path / "tests" / "fixtures")
    first, *expected = block.splitlines()
    assert first == f"$ {cmd}", f"{doc}: the block must start with the command it shows"
    argv = shlex.split(cmd)
    assert argv[0] == "rlprof"
    env = {**os.environ, "COLUMNS": "100"}
    run = subprocess.run([str(Path(sys.executable).parent / "rlprof"), *argv[1:]], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    printed = run.stdout
    for here, neutral in neutral_paths(tmp_path):
        printed = printed.replace(here, neutral)
    assert [line.rstrip() for line in printed.splitlines()] == [line.rstrip() for line in expected], (
        f"{doc}: `{cmd}` prints otherwise now; paste its output:\n{printed}")
