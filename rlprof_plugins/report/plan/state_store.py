"""The report's folder below each server's root (``ROOT/.rlprof-report-cache/``) and a reader's state kept in it.

It holds the cache of passes (``execute.passes.PassCache``) and the step logs' reader's state with the
measured steps' store (``measured_rows``). Entries are written atomically, named without a trace suffix
(no trace tool mistakes one for a trace); one that cannot be read counts as absent, and a root that
cannot be written to is said once and read without them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ... import __version__
from ...atomic_files import write_text_atomic
from ...trace.format.codec import decode, encode

CACHE_DIR = ".rlprof-report-cache"
SUFFIX = ".rlprof-cache"
STATE_SUFFIX = ".rlprof-state"  # a reader's own state between runs (the step logs read so far)
# the shape of what is kept: entries of another rlprof release (or an older shape) are made again
VERSION = [9, __version__]


class StateStore:
    """What a reader keeps between runs below one server's root (disabled: ``--no-cache``)."""

    def __init__(self, root: Path, enabled: bool = True) -> None:
        self.folder = root / CACHE_DIR
        self.enabled = enabled
        self.write_error: str | None = None

    def state(self, name: str) -> Any:
        """What a reader kept between runs under ``name`` (None: nothing, another release's, disabled)."""
        if not self.enabled:
            return None
        try:
            entry = decode((self.folder / f"{name}{STATE_SUFFIX}").read_bytes())
        except (OSError, ValueError):
            return None
        return entry.get("state") if isinstance(entry, dict) and entry.get("version") == VERSION else None

    def keep_state(self, name: str, value: Any) -> None:
        if not self.enabled or self.write_error:
            return
        try:
            write_text_atomic(self.folder / f"{name}{STATE_SUFFIX}", encode({"version": VERSION, "state": value}).decode())
        except OSError as e:  # a read-only root: the report is still written elsewhere (-o)
            self.write_error = f"{self.folder}: {e.strerror or e}"
