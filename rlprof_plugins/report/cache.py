"""The step report's per-step result cache: re-running after one more step reads only that step.

One file per step folder in ``ROOT/.rlprof-report-cache/`` holds the step's
computed row and the fingerprint it was computed from: the size and
modification time (ns) of the step's manifest, trace files and memory snapshots. Any
change (a rank finished writing, a merge landed, a file was rewritten)
changes the fingerprint and the step is read again. The step logs' reader
keeps how far it read each log and the numbers so far (``state``), so one
more measured step costs only its own lines. The files are written
atomically and named ``*.rlprof-cache`` (no trace suffix: no trace tool
mistakes them for a trace); one that cannot be read counts as absent, and a
root that cannot be written to is reported once and read without a cache.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .. import __version__
from ..atomic_files import write_text_atomic
from ..store.manifest import MANIFEST
from ..trace.format.codec import decode, encode

CACHE_DIR = ".rlprof-report-cache"
SUFFIX = ".rlprof-cache"
STATE_SUFFIX = ".rlprof-state"  # a reader's own state between runs (the step logs read so far)
# a row's shape: entries of another rlprof release (or an older shape) are recomputed
VERSION = [7, __version__]  # 3: rows hold operators by stage, unreadable files, sources; 4: device time as a
# partition (rank, stage, iteration), missing ranks in one line, ranks assumed for traces that record none;
# 5: Python frames per stage (``stage_python``); 6: measured steps hold each rank's tail and when its generation
# ended, and their briefs when each replica's generation began and ended; 7: measured steps hold each rank's RL
# phases


def fingerprint(directory: Path, traces: list[Path]) -> list[list]:
    files = [*traces, directory / MANIFEST]
    out = []
    inside = str(directory) + os.sep  # a fleet's warm report takes hundreds of these: strings, not Path calls
    for path in sorted(files):
        text = str(path)
        try:
            st = os.stat(text)
        except OSError:
            continue
        out.append([text[len(inside):] if text.startswith(inside) else str(path.relative_to(directory)),
                    st.st_size, st.st_mtime_ns])
    return out


class StepCache:
    """Rows by step folder, valid while the folder's fingerprint holds."""

    def __init__(self, root: Path, enabled: bool = True) -> None:
        self.folder = root / CACHE_DIR
        self.enabled = enabled
        self.hits = self.misses = 0
        self.forgotten = 0  # entries of step folders retention pruned, dropped this run
        self.write_error: str | None = None

    def _path(self, directory: Path) -> Path:
        return self.folder / f"{directory.name or 'root'}{SUFFIX}"

    def get(self, directory: Path, key: list[list]) -> dict[str, Any] | None:
        if not self.enabled:
            return None
        try:
            entry = decode(self._path(directory).read_bytes())
        except (OSError, ValueError):
            entry = None
        if isinstance(entry, dict) and entry.get("version") == VERSION and entry.get("key") == key:
            self.hits += 1
            return entry["row"]
        self.misses += 1
        return None

    def put(self, directory: Path, key: list[list], row: dict[str, Any]) -> None:
        if not self.enabled or self.write_error:
            return
        try:
            write_text_atomic(self._path(directory), encode({"version": VERSION, "key": key, "row": row}).decode())
        except OSError as e:  # a read-only root: the report is still written elsewhere (-o)
            self.write_error = f"{self.folder}: {e.strerror or e}"

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
        except OSError as e:
            self.write_error = f"{self.folder}: {e.strerror or e}"

    def forget_others(self, keep: list[Path]) -> None:
        """Drop entries of step folders no longer there (retention pruned them)."""
        if not self.enabled or not self.folder.is_dir():
            return
        wanted = {self._path(d).name for d in keep}
        for entry in self.folder.glob(f"*{SUFFIX}"):
            if entry.name not in wanted:
                try:
                    os.unlink(entry)
                    self.forgotten += 1
                except OSError:
                    pass
