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
# commands an earlier release had, which the changelog names in that release's section
REMOVED_COMMANDS = {"selftest"}


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
    """docs/configuration.md's key table is ``config.key_reference.key_table()`` (one row a key, every key
    the parser takes, in its order), and every native key rlprof reads is named on the page."""
    from rlprof_plugins.config.key_reference import key_table
    from rlprof_plugins.config.launch_config import TORCH_KEYS
    from rlprof_plugins.config.options import OUR_KEYS

    text = CONFIGURATION.read_text()
    keys = section(text, "## Keys (in `--profiler-config`)")
    block = keys.split("<!-- config-keys:start -->\n")[1].split("<!-- config-keys:end -->")[0]
    assert block == key_table(), "regenerate: make patch-table"
    assert re.findall(r"^\| `([a-z_]+)` \|", block, re.M) == list(OUR_KEYS)
    assert {k for k in TORCH_KEYS if f"`{k}`" not in text and f'"{k}"' not in text} == set(), (
        "native keys rlprof reads, undocumented")


def test_every_environment_variable_is_documented_and_every_documented_one_is_read():
    in_package = names_in([REPO / "rlprof_plugins"], ENV_NAME)
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
                if name in NOT_COMMANDS or (doc.name == "CHANGELOG.md" and name in REMOVED_COMMANDS):
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
    source = "\n".join(p.read_text() for root in ("rlprof_plugins",)
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
    """``[fleet-report.md](fleet-report.md), "A fleet of replicas"``: the page holds a heading that starts so (headings
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


def test_every_default_the_key_table_shows_is_the_parsers():
    """The key table reads each default from the parser; where it writes one another way (``shown``:
    ``flight_recorder``'s settings as ``true``), that value parses to the same default, so the page never
    states a default the code does not have."""
    from rlprof_plugins.config.key_reference import KEYS, defaults
    from rlprof_plugins.config.options import parse_options

    parsed = defaults()
    rewritten = [doc for doc in KEYS if doc.shown is not None]
    assert rewritten, "no default is written another way: this test checks nothing"
    wrong = [doc.key for doc in rewritten if parse_options({doc.key: doc.shown}).to_dict()[doc.key] != parsed[doc.key]]
    assert wrong == []


def test_the_http_reference_has_every_route_each_engine_serves():
    """docs/api.md's "HTTP" section heads one entry per route, and those are exactly the routes
    rlprof serves on vLLM and on SGLang (``patches/profile_routes.py``, bound by each engine's HTTP patch);
    no page counts the routes in words (a count drifts as routes are added: "all three routes" stood beside
    six)."""
    from rlprof_plugins.patches.profile_routes import ROUTES

    documented = set(re.findall(r"^### `(?:GET|POST) (/[\w/]+)", section((REPO / "docs" / "api.md").read_text(), "## HTTP"), re.M))
    assert documented == {route.path for route in ROUTES}  # declared once, bound by both engines' patches
    counted = [f"{doc.name}: {m.group(0)}" for doc in DOCS
               for m in re.finditer(r"\b(?:two|three|four|five|six|seven|eight|\d+) (?:profiling )?routes\b",
                                    doc.read_text())]
    assert counted == []


USER_PAGES = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b|\b(?:January|February|March|April|May|June|July|August|September|October|"
                  r"November|December) 20\d\d\b")
ISSUE = re.compile(r"(?<![\w/#&])(?:[Ii]ssues? \d+|#\d{2,}(?![\w-]))")
CHECKOUT = re.compile(r"/work/|/home/\w+/|/root/(?!\.cache)")
RESULTS_FILE = re.compile(r"benchmarks/results/[^\s`)]+")


def test_no_user_page_carries_a_date_an_issue_number_or_a_checkout_path():
    """The user pages describe the product as it is: run logs and dates live in benchmarks/results/, our
    issue numbers in the tracker, and a sample output shows a neutral path, not a developer's checkout.
    Other projects' issues and pull requests are named with their repository (``vLLM RFC``, ``verl
    #4264``)."""
    found = []
    for page in USER_PAGES:
        for n, line in enumerate(page.read_text().splitlines(), 1):
            undated = RESULTS_FILE.sub("", line)  # a run's file is named by its day: a pointer to it is no date
            for pattern, what in ((DATE, "a date"), (CHECKOUT, "a checkout path")):
                if pattern.search(undated):
                    found.append(f"{page.name}:{n}: {what}: {line.strip()[:120]}")
            for m in ISSUE.finditer(line):
                before = line[:m.start()]
                if m.group(0).startswith("#") and re.search(r"(vLLM|SGLang|verl|torch|PyTorch|Ray|HTA|[\w-]+/[\w-]+)"
                                                            r"[\w ]{0,12}$", before):
                    continue  # another project's issue, named with its project
                found.append(f"{page.name}:{n}: an issue number: {line.strip()[:120]}")
    assert found == []


METRIC = re.compile(r"\brlprof_[a-z_]+[a-z]\b")
SAMPLE_SUFFIXES = ("_total", "_bucket", "_count", "_sum")


def test_every_metric_served_is_on_the_dashboards_page_and_every_metric_it_names_is_served():
    """The metric families ``/metrics`` serves (``metrics.series``, where each is named once) against
    docs/dashboards.md and the Grafana dashboard beside it: a family served and not documented, or a query
    naming a family no collector serves (it would show nothing), fails."""
    served = set(re.findall(r'"(rlprof_[a-z_]+)"', (REPO / "rlprof_plugins" / "metrics" / "series.py").read_text()))
    assert len(served) >= 15, served
    page = (REPO / "docs" / "dashboards.md").read_text()
    assert {name for name in served if name not in page} == set(), "served, not in docs/dashboards.md"

    def family(name: str) -> str:
        for suffix in SAMPLE_SUFFIXES:
            if name.endswith(suffix) and name[:-len(suffix)] in served:
                return name[:-len(suffix)]
        return name

    named = set(METRIC.findall(page))
    for board in (REPO / "docs" / "grafana").glob("*.json"):
        named |= set(METRIC.findall(board.read_text()))
    assert {n for n in named if family(n) not in served} == set(), "named in the docs, served by nothing"


# Pages for maintainers (the design, the measurements, the tests) and pages generated from the code may run long;
# a user reads the others to the end.
MAINTAINER_PAGES = {"architecture.md", "performance.md", "testing.md", "patches.md", "compatibility.md"}
MAX_USER_PAGE_LINES = 400
# How a note from the bench reads on a user page: where it ran, not what the product does.
LAB_NOTE = re.compile(r"this (?:CPU )?(?:test|bench) machine|this VM\b|tested live on CPU|not run here|"
                      r"on this machine's kernel", re.I)


def test_every_user_page_is_short_enough_to_finish_and_holds_no_lab_note():
    long_pages = [f"{page.name}: {n} lines" for page in USER_PAGES if page.name not in MAINTAINER_PAGES
                  and (n := len(page.read_text().splitlines())) > MAX_USER_PAGE_LINES]
    assert long_pages == [], f"split them: no user page over {MAX_USER_PAGE_LINES} lines"
    notes = [f"{page.name}:{n}: {line.strip()[:100]}" for page in USER_PAGES if page.name not in MAINTAINER_PAGES
             for n, line in enumerate(page.read_text().splitlines(), 1) if LAB_NOTE.search(line)]
    assert notes == [], "lab notes belong in performance.md or testing.md"


def test_the_lab_note_check_finds_what_it_looks_for():
    assert all(LAB_NOTE.search(s) for s in ("answers 400 (this CPU test machine)", "Tested live on CPU: ...",
                                            "trainer.md's part not run here", "this bench machine"))
    assert not LAB_NOTE.search("runs on this machine, with no engine")  # the user's own machine


CHECKED_BY = re.compile(r"^(\d+)\. `(tests/[\w/]+\.py)::(\w+)`$", re.M)


def test_every_row_of_the_page_for_native_users_names_a_test_that_exists():
    """docs/from-native.md: each row of its tables ends with the number of the test that checks it, listed under
    "The checks", and that test is defined in that file (a renamed or deleted test leaves a row unchecked)."""
    import ast

    page = (REPO / "docs" / "from-native.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| ") and not line.startswith("| native")
            and not line.startswith("| ---")]
    assert len(rows) >= 15, len(rows)
    checks = {int(n): (path, test) for n, path, test in CHECKED_BY.findall(section(page, "## The checks"))}
    wrong = []
    for row in rows:
        m = re.search(r"\| \[(\d+)\] \|$", row)
        if m is None or int(m.group(1)) not in checks:
            wrong.append(f"no check named: {row[:80]}")
    for path, test in checks.values():
        tree = ast.parse((REPO / path).read_text())
        if test not in {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}:
            wrong.append(f"{path} defines no {test}")
    assert wrong == []
