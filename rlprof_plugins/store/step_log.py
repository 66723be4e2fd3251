"""Each finished step's metrics as one JSON line in ``<dir>/steps/<rank>.jsonl``, written off the engine thread.

The engine thread only puts the record on a queue; one daemon thread per
process appends it (``O_APPEND``, a whole line per write, flushed), so a
restarted server appends to what is there and never overwrites. A file past
``MAX_BYTES`` is rotated once (``<rank>.jsonl.1``), so the folder stays
bounded however long the run. Reading skips a torn line (a crash mid-write)
with a warning naming the file and line, never fails on one; records of the
same step and rank (a server restarted inside a step) are combined: bucket
counts, totals and tokens add up.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import queue
import threading
from pathlib import Path
from typing import Any

from .layout import STEPS_DIR

log = logging.getLogger("rlprof")
# upper bounds (ms) of the iteration-time buckets of every record (``counts``); the last is +inf.
# The boundaries of a Prometheus histogram: p50/p90 come from them, ranks and restarts add up exactly.
BUCKETS_MS = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0,
              float("inf"))
MAX_BYTES = 64 << 20
SUFFIX = ".jsonl"
STATE_SUFFIX = ".state.json"  # the step open now and the finished steps' running totals (``step_series``)


class StepLog:
    """Appends records to ``folder/<rank>.jsonl`` from a background thread."""

    def __init__(self, folder: str | Path, rank: str, max_bytes: int = MAX_BYTES) -> None:
        self.path = Path(folder) / f"{rank}{SUFFIX}"
        self.max_bytes = max_bytes
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self.written = 0
        self.error: str | None = None
        self._checked = False
        self.state = RunningTotals(rank)
        self._thread = threading.Thread(target=self._run, name=f"rlprof-step-log-{rank}", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def put(self, record: dict[str, Any]) -> None:
        """On the engine thread: never blocks, never raises."""
        self._queue.put(("record", record))

    def put_step(self, step: Any) -> None:
        """The step open now (on the engine thread, as ``put``)."""
        self._queue.put(("step", step))

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
                    self._append(json.dumps(value, separators=(",", ":")) + "\n")
                    self.written += 1
                    self.state.add(value)
                else:
                    self.state.global_step = value
                self.state.write(self.path.with_name(self.path.name[:-len(SUFFIX)] + STATE_SUFFIX))
            except Exception as e:  # a full disk: say so once, keep serving
                if self.error is None:
                    log.warning("rlprof: step metrics not written to %s: %s", self.path, e)
                self.error = f"{type(e).__name__}: {e}"

    def _append(self, line: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            if self.path.stat().st_size + len(line) > self.max_bytes:
                os.replace(self.path, self.path.with_name(self.path.name + ".1"))
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


class RunningTotals:
    """What the ``/metrics`` series read: the open step and the finished steps' totals since start."""

    def __init__(self, rank: str) -> None:
        self.rank, self.global_step, self.steps = rank, None, 0
        self.last_step: int | None = None  # the newest finished step with a number
        self.busy_ms = self.idle_ms = 0.0
        self.stages: dict[str, dict[str, Any]] = {}

    def add(self, record: dict[str, Any]) -> None:
        self.steps += 1
        if isinstance(record.get("global_step"), int):
            self.last_step = record["global_step"]
        self.busy_ms += record.get("busy_ms", 0.0)
        self.idle_ms += record.get("idle_ms", 0.0)
        for stage, t in record.get("stages", {}).items():
            mine = self.stages.setdefault(stage, {"iterations": 0, "total_ms": 0.0, "prefill_tokens": 0,
                                                  "decode_tokens": 0, "counts": [0] * len(BUCKETS_MS)})
            for key in ("iterations", "total_ms", "prefill_tokens", "decode_tokens"):
                mine[key] += t.get(key, 0)
            mine["counts"] = [a + b for a, b in zip(mine["counts"], t.get("counts", []))]

    def write(self, path: Path) -> None:
        data = {"rank": self.rank, "global_step": self.global_step, "last_step": self.last_step, "steps": self.steps,
                "busy_ms": round(self.busy_ms, 3), "idle_ms": round(self.idle_ms, 3), "stages": self.stages}
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_text(json.dumps(data))
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


def read_steps(root: str | Path) -> tuple[dict[int | None, dict[str, dict]], list[str]]:
    """``{global_step: {rank: record}}`` from ``ROOT/steps/*.jsonl`` (rotated files first), and the warnings."""
    out: dict[int | None, dict[str, dict]] = {}
    warnings: list[str] = []
    folder = step_folder(root)
    if not folder.is_dir():
        return out, warnings
    files = sorted(folder.glob(f"*{SUFFIX}.1")) + sorted(folder.glob(f"*{SUFFIX}"))
    for path in files:
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError as e:
            warnings.append(f"{path}: {e.strerror or e}")
            continue
        for number, line in enumerate(lines, 1):
            try:
                record = json.loads(line)
                step, rank = record["global_step"], str(record["rank"])
            except (ValueError, KeyError, TypeError):
                warnings.append(f"{path}:{number}: not a whole step record (a write cut short?): skipped")
                continue
            ranks = out.setdefault(step, {})
            ranks[rank] = combine(ranks[rank], record) if rank in ranks else record
    return out, warnings


def combine(a: dict, b: dict) -> dict:
    """One step of one rank recorded in two parts (a restart): counts and totals add up."""
    out = dict(a)
    for key in ("iterations", "busy_ms", "idle_ms"):
        out[key] = round(a.get(key, 0) + b.get(key, 0), 3)
    out["started_at"], out["ended_at"] = min(a["started_at"], b["started_at"]), max(a["ended_at"], b["ended_at"])
    stages = {k: dict(v) for k, v in a.get("stages", {}).items()}
    for stage, t in b.get("stages", {}).items():
        mine = stages.get(stage)
        if mine is None:
            stages[stage] = dict(t)
            continue
        for key in ("iterations", "total_ms", "prefill_tokens", "decode_tokens", "batch_sum"):
            mine[key] = round(mine.get(key, 0) + t.get(key, 0), 3)
        mine["max_ms"] = max(mine.get("max_ms", 0), t.get("max_ms", 0))
        mine["counts"] = [x + y for x, y in zip(mine["counts"], t["counts"])]
    out["stages"] = stages
    return out
