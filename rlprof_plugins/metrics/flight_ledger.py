"""The flight recorder's dumps below one directory and their sizes, in a small ledger file.

A new dump makes room under ``disk_mb`` by removing the oldest dumps the recorder wrote on its own. Sizing
every dump of every step folder before each dump would cost more the longer a run goes; the ledger
(``ROOT/steps/.flight-dumps.json``) keeps each dump's folder, its bytes and whether it was requested, so
making room reads one small file and touches only the folders it removes. Every rank's writer updates it
under a lock as it adds its files to a dump. A missing or unreadable ledger (a directory written before it
existed) is rebuilt once by walking the dumps; a dump folder removed by something else (retention removes a
step's folder with its dumps) leaves the ledger when making room comes to it.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

from .._log import logger
from ..atomic_files import write_text_atomic
from ..store.layout import STEPS_DIR

LEDGER_FILE = ".flight-dumps.json"
_LOCK = ".flight-dumps.lock"


@dataclass
class LedgerEntry:
    """One dump: its folder, the bytes its files hold, when its event ended (from the folder's name, Unix
    seconds) and whether it was asked for (a requested dump is never removed to make room)."""

    folder: str
    bytes: int
    ended_at: float
    requested: bool


class DumpLedger:
    """The ledger of the dumps below ``root``; every method takes the ledger's lock."""

    def __init__(self, root: str | os.PathLike, walk: Callable[[], Iterable[LedgerEntry]]) -> None:
        self.root = Path(root)
        self.path = self.root / STEPS_DIR / LEDGER_FILE
        self._walk = walk  # every dump on disk: the rebuild

    @contextmanager
    def _held(self) -> Iterator[dict[str, LedgerEntry]]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.parent / _LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            entries = self._read()
            before = None if entries is None else dict(entries)
            if entries is None:
                entries = {e.folder: e for e in self._walk()}
            yield entries
            if entries != before:  # rebuilt, or changed: written; a dump that fit as it was writes nothing
                write_text_atomic(self.path, json.dumps([asdict(e) for e in entries.values()]))

    def _read(self) -> dict[str, LedgerEntry] | None:
        try:
            return {e["folder"]: LedgerEntry(**e) for e in json.loads(self.path.read_text())}
        except (OSError, ValueError, TypeError, KeyError):
            return None

    def written(self, entry: LedgerEntry) -> None:
        """A dump's folder now holds ``entry.bytes`` (each rank sets it after adding its files)."""
        with self._held() as entries:
            entries[entry.folder] = entry

    def make_room(self, budget: int) -> int:
        """Remove the oldest dumps the recorder wrote on its own until the dumps hold less than ``budget``
        bytes; the bytes left."""
        with self._held() as entries:
            used = sum(e.bytes for e in entries.values())
            if used < budget:
                return used
            for entry in sorted(entries.values(), key=lambda e: (e.requested, e.ended_at, e.folder)):
                folder = Path(entry.folder)
                if folder.is_dir():
                    if entry.requested:
                        continue
                    shutil.rmtree(folder, ignore_errors=True)
                    if folder.exists():
                        continue
                    logger.warning("rlprof: flight recorder: removed the oldest dump %s to keep the dumps under "
                                   "flight_recorder.disk_mb", folder)
                del entries[entry.folder]
                used -= entry.bytes
                if used < budget:
                    break
            return used
