"""The command line is assembled from one list of ``Command`` declarations.

Each subcommand's arguments sit beside its handler; these tests run the real
parser: every declared command answers ``--help`` with its own options, each
is reachable once, and an option a command's help mentions exists there.
"""

import re

import pytest

from rlprof_plugins.cli import main
from rlprof_plugins.cli.command import build_parser, commands


def help_of(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as done:
        main([*argv, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def test_every_declared_command_is_on_the_command_line_once(capsys):
    names = [c.name for c in commands()]
    assert len(names) == len(set(names))
    listed = re.search(r"\{([a-z,-]+)\}", help_of(capsys)).group(1).split(",")
    assert listed == names  # the top-level help lists every command, in the declared order
    for name in ("report", "upload", "stitch", "collect", "npu-analyse", "doctor"):
        assert name in names


@pytest.mark.parametrize("command", [c.name for c in commands()])
def test_each_command_help_offers_every_option_it_mentions(capsys, command):
    text = help_of(capsys, command)
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    options = set(sub.choices[command]._option_string_actions)  # what the parser accepts
    mentioned = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", text))
    assert mentioned <= options, f"{command} --help mentions {sorted(mentioned - options)}, which it does not take"


def test_the_parser_runs_each_commands_own_handler():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert {name: p.get_default("func") for name, p in sub.choices.items()} == {c.name: c.run for c in commands()}
