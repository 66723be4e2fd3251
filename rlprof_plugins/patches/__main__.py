"""Print the patch table: ``python -m rlprof_plugins.patches > docs/patches.md``."""

from . import markdown_table

print(markdown_table(), end="")
