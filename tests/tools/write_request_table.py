"""Rewrite the request-field table between its markers in a Markdown file
(docs/configuration.md) from ``rlprof_plugins.config.request_fields``."""

import sys
from pathlib import Path

from rlprof_plugins.config.request_fields import field_table

START, END = "<!-- request-fields:start -->\n", "<!-- request-fields:end -->"

if __name__ == "__main__":
    path = Path(sys.argv[1])
    text = path.read_text()
    head, rest = text.split(START)
    _, tail = rest.split(END)
    path.write_text(head + START + field_table() + END + tail)
