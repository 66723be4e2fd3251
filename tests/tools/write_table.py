"""Rewrite a generated table between its markers in a Markdown file: ``write_table.py FILE NAME``, NAME one of
``request-fields`` (docs/api.md, ``config.request_fields``), ``config-keys`` (docs/configuration.md,
``config.key_reference``), ``communication-kernels``
(docs/device-time.md, ``trace.analysis.communication``) and ``cli-synopsis`` (docs/cli.md, ``cli.command``)."""

import sys
from pathlib import Path

from rlprof_plugins.cli.command import synopsis
from rlprof_plugins.config.key_reference import key_table
from rlprof_plugins.config.request_fields import field_table
from rlprof_plugins.trace.analysis.communication import family_table

TABLES = {"request-fields": field_table, "config-keys": key_table, "communication-kernels": family_table, "cli-synopsis": synopsis}


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:start -->\n", f"<!-- {name}:end -->"


if __name__ == "__main__":
    path, name = Path(sys.argv[1]), sys.argv[2]
    start, end = markers(name)
    text = path.read_text()
    head, rest = text.split(start)
    _, tail = rest.split(end)
    path.write_text(head + start + TABLES[name]() + end + tail)
