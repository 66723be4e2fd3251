"""What every ``rlprof`` command shares: the user-facing error, progress on
stderr, results on stdout, exit codes."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Callable

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class CliError(Exception):
    """A user-facing failure: message printed, exit code 1."""


class UsageError(CliError):
    """Arguments that cannot go together or make no sense (``--steps 5-3``): exit code 2, as argparse's own."""


def progress_of(args) -> Callable[[str], None] | None:
    if getattr(args, "quiet", False):
        return None
    return lambda message: print(message, file=sys.stderr, flush=True)


def reap_folder(root: Path) -> None:
    """Writers whose process is gone leave their step ``exporting`` for good:
    mark them failed (same machine only) before reading the folder."""
    from ..store.reaping import reap_all

    for folder, names in reap_all(root).items():
        print(f"rlprof: {folder}: {', '.join(names)} marked failed: the writing process is gone", file=sys.stderr)


def emit(args, data: dict, text: str) -> None:
    print(json.dumps(data, indent=2) if getattr(args, "json", False) else text)


def finish_kept(inputs: list[Path], outputs: list, command: str, *, consumed: bool = False) -> list[str]:
    """After a command finished a kept recording (``store.recovery``): its step's manifest says done."""
    from ..store.recovery import finished

    try:
        return finished(list(inputs), outputs, command, consumed=consumed)
    except OSError as e:  # the output is written; only the manifest could not say so
        print(f"rlprof: warning: could not update the step's manifest: {e}", file=sys.stderr)
        return []


def recovered_line(recovered: list[str]) -> str:
    return f"\nthe step's manifest now says done for {', '.join(recovered)}" if recovered else ""
