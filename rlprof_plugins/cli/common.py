"""What every ``rlprof`` command shares: the user-facing error, progress on
stderr, results on stdout, exit codes."""

from __future__ import annotations

import atexit
import json
import re
import sys
from pathlib import Path
from typing import Any, Callable

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class CliError(Exception):
    """A user-facing failure: message printed, exit code 1."""


class UsageError(CliError):
    """Arguments that cannot go together or make no sense (``--steps 5-3``): exit code 2, as argparse's own."""


def progress_of(args) -> Callable[[str], None] | None:
    """A command's progress on stderr (None with ``--quiet``): one line however many steps and replicas
    it reads (``OneLine``)."""
    if getattr(args, "quiet", False):
        return None
    return OneLine(sys.stderr)


# What the trace readers say once per step and stage they read (``trace_stats.stats_of``)
READING = re.compile(r"^reading (?P<traces>\d+) traces \((?P<mb>[\d,]+) MB\)")


class OneLine:
    """Progress as one line. On a terminal every message rewrites it (the latest in place, then a newline
    when the command ends); elsewhere (a log, a pipe) a step's "reading N traces" says nothing while the
    command runs, and one line at its end counts them all; any other message is printed as it comes."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.terminal = bool(getattr(stream, "isatty", lambda: False)())
        self.shown = False  # a line in place on the terminal, not yet ended
        self.traces = self.reads = 0
        self.megabytes = 0
        atexit.register(self.close)

    def __call__(self, message: str) -> None:
        if self.terminal:
            self.stream.write("\r" + message.strip() + "\x1b[K")
            self.stream.flush()
            self.shown = True
            return
        read = READING.match(message)
        if read:
            self.reads += 1
            self.traces += int(read["traces"])
            self.megabytes += int(read["mb"].replace(",", ""))
            return
        print(message, file=self.stream, flush=True)

    def close(self) -> None:
        """The command is done: end the terminal's line, or say what was read (once). Also at exit, for a
        command that never calls it; a stream already closed (a test's capture) is left alone."""
        atexit.unregister(self.close)
        try:
            if self.shown:
                self.stream.write("\n")
            elif self.reads:
                print(f"read {self.traces} traces ({self.megabytes:,} MB) in {self.reads} step folder"
                      f"{'s' if self.reads > 1 else ''}", file=self.stream, flush=True)
            self.stream.flush()
        except (OSError, ValueError):
            pass
        self.shown, self.reads = False, 0


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


def local_path(text: str, steps: tuple[int, int] | None = None, *, file: bool = False) -> str:
    """A path argument as a local path: itself, or for an object store URI its local copy (of ``steps``
    only, or of one ``file``); a store that cannot be read is a ``CliError`` naming it."""
    from ..store import object_store, remote_read

    if not object_store.is_uri(text):
        return text
    try:
        return remote_read.readable_file(text) if file else remote_read.readable(text, steps)
    except object_store.MissingLibrary as e:
        raise CliError(str(e)) from None
    except Exception as e:  # the store's own errors: no such bucket, refused credentials, no network
        raise CliError(f"{text}: could not be read: {type(e).__name__}: {e}") from None
