"""What the docs name exists in the code, and what the code defines is documented: both directions.

- configuration keys: every rlprof key (``config.options.OUR_KEYS``) heads an entry of
  docs/configuration.md's "Keys" section, and every entry there is a key; every native key rlprof
  reads (``launch_config.TORCH_KEYS``) is named in the configuration reference;
- environment variables: every ``RLPROF_*`` name in the package is in the "Environment variables"
  section of docs/configuration.md, and every ``RLPROF_*`` name in the docs is one the package, the
  tests or the Makefile reads;
- commands and flags: every command of ``rlprof`` and each of its flags is in docs/cli.md, and every
  ``rlprof COMMAND --flag`` written in the docs (in code) is a command that takes that flag;
- sample outputs: every ``text`` block is a command's real output (``<!-- real output: CMD -->``,
  run by tests/packaging/test_documented_output.py) or a sample a named test asserts a phrase of
  (``<!-- sample: tests/FILE.py::TEST asserts "PHRASE" -->``: the test exists, its file holds the
  phrase, so does the block); every key of a ``json`` block is a name the package's code uses;
- sections: every ``page.md, "Section"`` a doc points to is a heading of that page;
- lines: no line of the docs is over 300 characters (a table row included).
"""

from __future__ import annotations

import argparse
import re
from functools import lru_cache
from pathlib import Path

from tests.helpers.installed import REPO

DOCS = sorted([REPO / "README.md", REPO / "CHANGELOG.md", REPO / "CONTRIBUTING.md", *(REPO / "docs").glob("*.md")])
CONFIGURATION = REPO / "docs" / "configuration.md"
CLI = REPO / "docs" / "cli.md"
ENV_NAME = re.compile(r"\bRLPROF_[A-Z][A-Z_]*[A-Z]\b")
# a command line: at the start of a code span or line, or after a shell prompt or a pipe
COMMAND_USE = re.compile(r"(?:^|\$ |&& |; )\s*rlprof ([a-z][a-z-]*)((?: +[^\s`|]+)*)")
MAX_LINE = 300
# names that start like a command and are not: a column of `rlprof summary`, the keys rlprof adds
NOT_COMMANDS = ("pauses", "keys")


def section(text: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading of the same or a higher level."""
    level = heading.split(" ")[0]
    start = text.index(heading + "\n")
    body = text[start + len(heading) + 1:]
    ends = [m.start() for m in re.finditer(r"^#{1,%d} " % len(level), body, re.M)]
    return body[:ends[0]] if ends else body


def entry_heads(text: str) -> set[str]:
    """The backticked names that head each bullet of ``text`` (``- `a`, `b`: ...`` heads a and b), a
    bullet's continuation lines joined to it."""
    bullets = re.split(r"^- ", text, flags=re.M)[1:]
    heads = set()
    for bullet in bullets:
        m = re.match(r"((?:`[^`]+`(?:,\s*|\s+and\s+)?)+)\s*[:=]", " ".join(bullet.split()))
        if m:
            heads.update(re.findall(r"`([^`=]+)(?:=[^`]*)?`", m.group(1)))
    return heads


def code_of(text: str) -> list[str]:
    """Every code span (of a paragraph: a span may cross a line) and every line of a fenced block:
    where docs write commands."""
    out, fence, prose = [], False, []
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
            continue
        if fence:
            out.append(line)
        else:
            prose.append(line)
    for paragraph in "\n".join(prose).split("\n\n"):
        out.extend(" ".join(span.split()) for span in re.findall(r"`([^`]+)`", paragraph))
    return out


def names_in(roots: list[Path], pattern: re.Pattern) -> set[str]:
    found = set()
    for root in roots:
        for path in (root.rglob("*.py") if root.is_dir() else [root]):
            found.update(pattern.findall(path.read_text(errors="replace")))
    return found


@lru_cache(maxsize=None)
def parser_commands() -> dict[str, tuple[tuple[str, ...], ...]]:
    """``{command: the option strings of each of its flags}`` of the real ``rlprof`` parser."""
    from rlprof_plugins.cli.command import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {name: tuple(tuple(action.option_strings) for action in p._actions if action.option_strings)
            for name, p in sub.choices.items()}


def long_flags(command: str) -> set[str]:
    return {s for strings in parser_commands()[command] for s in strings if s.startswith("--")}


def test_every_key_is_documented_and_every_documented_key_exists():
    from rlprof_plugins.config.launch_config import TORCH_KEYS
    from rlprof_plugins.config.options import OUR_KEYS

    text = CONFIGURATION.read_text()
    documented = entry_heads(section(text, "## Keys (in `--profiler-config`)"))
    assert set(OUR_KEYS) - documented == set(), "keys the code defines that docs/configuration.md does not"
    assert documented - set(OUR_KEYS) == set(), "keys docs/configuration.md documents that the code lacks"
    assert {k for k in TORCH_KEYS if f"`{k}`" not in text and f'"{k}"' not in text} == set(), (
        "native keys rlprof reads, undocumented")


def test_every_environment_variable_is_documented_and_every_documented_one_is_read():
    in_package = names_in([REPO / "rlprof_plugins", REPO / "patches"], ENV_NAME)
    documented = {n for n in entry_heads(section(CONFIGURATION.read_text(), "## Environment variables"))
                  if ENV_NAME.fullmatch(n)}
    assert in_package - documented == set(), "variables the package reads that the docs do not list"
    named = set().union(*(ENV_NAME.findall(doc.read_text()) for doc in DOCS))
    read_anywhere = in_package | names_in([REPO / "tests", REPO / "benchmarks", REPO / "examples",
                                           REPO / "Makefile"], ENV_NAME)
    assert named - read_anywhere == set(), "variables the docs name that nothing reads"


def test_the_synopsis_in_cli_md_is_the_parsers():
    from rlprof_plugins.cli.command import synopsis

    text = CLI.read_text()
    block = text.split("<!-- cli-synopsis:start -->\n")[1].split("<!-- cli-synopsis:end -->")[0]
    assert block == synopsis(), "regenerate: make patch-table"


def test_every_command_and_flag_is_in_cli_md():
    text = CLI.read_text()
    missing = {f"rlprof {name}" for name in parser_commands() if f"rlprof {name}" not in text}
    assert missing == set()
    flags = {f"rlprof {name} {strings[0]}" for name, given in parser_commands().items() for strings in given
             if "--help" not in strings and not any(re.search(rf"(?<![\w-]){re.escape(s)}(?![\w-])", text)
                                                    for s in strings)}
    assert flags == set(), "flags the command takes that docs/cli.md does not name"


def test_every_command_and_flag_the_docs_write_exists():
    commands = parser_commands()
    wrong = []
    for doc in DOCS:
        for code in code_of(doc.read_text()):
            for m in COMMAND_USE.finditer(code):
                name, rest = m.group(1), m.group(2)
                if name in NOT_COMMANDS:
                    continue
                if name not in commands:
                    wrong.append(f"{doc.name}: rlprof {name}")
                    continue
                for flag in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", rest):
                    if flag not in long_flags(name) | {"--help"}:
                        wrong.append(f"{doc.name}: rlprof {name} ... {flag}")
    assert wrong == []


def test_no_docs_line_is_over_300_characters():
    long = [f"{doc.relative_to(REPO)}:{n}: {len(line)} characters" for doc in DOCS
            for n, line in enumerate(doc.read_text().splitlines(), 1) if len(line) > MAX_LINE]
    assert long == []


REAL = re.compile(r"<!-- real output: .+? -->")
SAMPLE = re.compile(r'<!-- sample: (?P<file>tests/[\w/]+\.py)::(?P<test>\w+) asserts "(?P<phrase>[^"]+)" -->')
GENERATED = re.compile(r"<!-- [\w-]+:start -->")


def blocks(text: str, language: str) -> list[tuple[str, str]]:
    """``(the line before the block, the block)`` of every fenced block in ``language``."""
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        if lines[i].startswith("```"):
            fence_language, end = lines[i][3:].strip(), i + 1
            while end < len(lines) and not lines[end].startswith("```"):
                end += 1
            if fence_language == language:
                out.append((lines[i - 1] if i else "", "\n".join(lines[i + 1:end])))
            i = end + 1
        else:
            i += 1
    return out


def test_every_text_block_is_real_output_or_a_sample_a_test_checks():
    loose = []
    for doc in DOCS:
        for before, block in blocks(doc.read_text(), "text"):
            if REAL.fullmatch(before) or GENERATED.fullmatch(before):
                continue
            sample = SAMPLE.fullmatch(before)
            if sample is None:
                loose.append(f"{doc.name}: {block.splitlines()[0][:60]}")
                continue
            test_file = REPO / sample["file"]
            source = test_file.read_text()
            assert re.search(rf"^\s*def {sample['test']}\(", source, re.M), f"{doc.name}: no test {sample['test']}"
            assert sample["phrase"] in source, f"{doc.name}: {sample['file']} does not assert {sample['phrase']!r}"
            assert sample["phrase"] in block, f"{doc.name}: the sample does not show {sample['phrase']!r}"
    assert loose == [], "text blocks neither real output nor a checked sample"


def test_every_key_of_a_json_sample_is_a_name_the_code_uses():
    source = "\n".join(p.read_text() for root in ("rlprof_plugins", "patches")
                       for p in sorted((REPO / root).rglob("*.py")))
    unknown = []
    for doc in DOCS:
        for _, block in blocks(doc.read_text(), "json"):
            for key in set(re.findall(r'"([A-Za-z_][\w]*)"\s*:', block)):
                if not re.search(rf"\b{re.escape(key)}\b", source):
                    unknown.append(f"{doc.name}: {key}")
    assert unknown == [], "keys the docs show that no code writes"


SECTION_REFERENCE = re.compile(r'\[?(?P<doc>[\w-]+\.md)\]?(?:\([^)]*\))?,? "(?P<title>[^"]+)"')


def test_every_section_a_doc_points_to_exists():
    """``[report.md](report.md), "A fleet of replicas"``: the page holds a heading that starts so (headings
    keep a subtitle after a colon)."""
    pages = {doc.name: doc for doc in DOCS}
    missing = []
    for doc in DOCS:
        for m in SECTION_REFERENCE.finditer(" ".join(doc.read_text().split())):
            target = pages.get(m["doc"])
            if target is None:
                continue
            headings = [h.strip().strip("`") for h in re.findall(r"^#+ (.+)$", target.read_text(), re.M)]
            title = m["title"].strip("`")
            if not any(h.replace("`", "").startswith(title.replace("`", "")) for h in headings):
                missing.append(f"{doc.name}: {m['doc']}, \"{m['title']}\"")
    assert missing == []
