"""One subcommand of ``rlprof``, declared beside its handler: name, help, arguments, handler.

The command line (``cli/command.py``) is assembled from a list of these; the
trace tools, the report, doctor, upload and the fleet commands
(``client/commands.py``) each declare theirs where their handler lives, so a
command is one declaration in one place. Among the base modules because the
trainer client declares commands too and sits below the command line.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Command:
    name: str
    help: str  # one line, in ``rlprof --help``
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]  # the exit code

    def add_to(self, sub) -> argparse.ArgumentParser:
        parser = sub.add_parser(self.name, help=self.help)
        self.arguments(parser)
        parser.set_defaults(func=self.run)
        return parser
