"""Each finished step's record as one JSON line in ``<dir>/steps/<rank>.jsonl``, written off the engine thread.

The engine thread only puts the record on a queue; one daemon thread per
process appends it (``O_APPEND``, a whole line per write, flushed), so a
restarted server appends to what is there and never overwrites. A file past
``MAX_BYTES`` is rotated once (``<rank>.jsonl.1``), so the folder stays
bounded however long the run. The same thread keeps the rank's running
totals in ``<rank>.state.json`` (``record.RankTotals``, what ``series``
reads at scrape time). Reading the lines back is ``reader``'s.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
from pathlib import Path
from typing import Any

from ..store.layout import STEPS_DIR
from .record import RankTotals, StepRecord

log = logging.getLogger("rlprof")
MAX_BYTES = 64 << 20
SUFFIX = ".jsonl"
ROTATED = SUFFIX + ".1"  # a line file, rotated once: the older half of its lines
STATE_SUFFIX = ".state.json"  # the step open now and the finished steps' running totals (``series``)


class StepLog:
    """Appends records to ``folder/<rank>.jsonl`` from a background thread."""

    def __init__(self, folder: str | Path, rank: str, max_bytes: int = MAX_BYTES) -> None:
        self.path = Path(folder) / f"{rank}{SUFFIX}"
        self.lines = LineFile(self.path, max_bytes)
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self.written = 0
        self.error: str | None = None
        self.state = RankTotals(rank)
        self._thread = threading.Thread(target=self._run, name=f"rlprof-step-log-{rank}", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def put(self, record: StepRecord) -> None:
        """On the engine thread: never blocks, never raises."""
        self._queue.put(("record", record))

    def put_step(self, step: Any) -> None:
        """The step open now (on the engine thread, as ``put``)."""
        self._queue.put(("step", step))

    def put_anomaly(self, reason: str, stage: str | None) -> None:
        """A flight recorder dump written (from its thread): counted in the state file."""
        self._queue.put(("anomaly", (reason, stage)))

    def put_dropped_dump(self, reason: str) -> None:
        """A flight recorder dump dropped for want of room (from its thread): counted in the state file."""
        self._queue.put(("dropped", reason))

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued, then stop (at exit, and in tests)."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            message = self._queue.get()
            if message is None:
                return
            kind, value = message
            try:
                if kind == "record":
                    self.lines.append(value.encode())
                    self.written += 1
                    self.state.add(value)
                elif kind == "anomaly":
                    self.state.count_anomaly(*value)
                elif kind == "dropped":
                    self.state.count_dropped_dump(value)
                else:
                    self.state.global_step = value
                _write_state(self.state, self.path.with_name(self.path.name[:-len(SUFFIX)] + STATE_SUFFIX))
            except Exception as e:  # a full disk: say so once, keep serving
                if self.error is None:
                    log.warning("rlprof: step metrics not written to %s: %s", self.path, e)
                self.error = f"{type(e).__name__}: {e}"


class LineFile:
    """A file of JSON lines, appended a whole line per write (``O_APPEND``), rotated once (``<name>.1``) past
    ``max_bytes`` so it stays bounded however long the run; a line a crash left torn is ended first."""

    def __init__(self, path: Path, max_bytes: int = MAX_BYTES) -> None:
        self.path, self.max_bytes = path, max_bytes
        self._checked = False

    def append(self, line: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            if self.path.stat().st_size + len(line) > self.max_bytes:
                os.replace(self.path, self.path.with_name(self.path.name[:-len(SUFFIX)] + ROTATED))
        except FileNotFoundError:
            pass
        if not self._checked:  # a line torn by a crash before this process: start on a line of our own
            self._checked = True
            if not _ends_a_line(self.path):
                line = "\n" + line
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


def _write_state(state: RankTotals, path: Path) -> None:
    """The state file replaced whole (a scrape never reads half of one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(state.encode())
    os.replace(temporary, path)


def _ends_a_line(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            f.seek(-1, os.SEEK_END)
            return f.read(1) == b"\n"
    except OSError:  # absent or empty
        return True


def step_folder(root: str | Path) -> Path:
    return Path(root) / STEPS_DIR
