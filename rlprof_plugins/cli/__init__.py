"""The ``rlprof`` command: ``main`` wires the subcommands.

``command`` (the parser, ``doctor`` and ``npu-analyse``), ``common`` (errors,
progress, exit codes every command shares), ``trace_commands`` (merge,
split-stages, summary, check, stitch), ``doctor`` and ``doctor_trainers``
(the installed engine and verl), ``compatibility`` (the release x feature
table behind doctor and docs/compatibility.md), ``installation`` (whether
the installed package is whole). The fleet commands (start, stop, status,
collect) are the trainer client's (``client.commands``).

The top layer of the core: it may import everything below it, the patch
registry included (doctor dry-runs the patches); nothing imports it.
"""

from .command import main

__all__ = ["main"]
