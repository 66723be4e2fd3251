"""The ``rlprof`` command: ``main`` wires the subcommands.

``command`` (the parser, ``doctor`` and ``npu-analyse``), ``common`` (errors,
progress, exit codes every command shares), ``trace_commands`` (merge,
split-stages, summary, check, stitch), ``report_command`` (``rlprof report``:
its arguments and exit code; the work is the ``report`` room's), ``doctor`` and
``doctor_trainers`` (the installed engine and verl), ``compatibility`` (the
release x feature table behind doctor and docs/compatibility.md),
``installation`` (whether the installed package is whole), ``upload_command``
(``rlprof upload``). The fleet commands (start, stop, status, collect) are the trainer
client's (``client.commands``).

The top layer of the core: nothing imports it; doctor dry-runs the patches.
May import: `report`, `client`, `patches`, `config`, `backends`, `trace`, `store` and the base modules.
"""

from .command import main

__all__ = ["main"]
