"""The report's rows for steps measured by ``step_metrics`` (``ROOT/steps/<rank>.jsonl``).

Every RL step the engine ran has numbers there, traced or not: a step with
no trace folder gets its own row (state ``measured``, "metrics only"), a
traced step keeps its trace's numbers and carries the measured ones beside
(``measured``). How a measured step's numbers are taken (each rank's
aggregates, the slowest rank's) is ``step_logs.steps``.
"""

from __future__ import annotations

import os
import tempfile
from array import array
from pathlib import Path
from typing import Any, BinaryIO, Iterator

from ...metrics.tail import longest_tail
from ...step_logs.steps import measured_incrementally, measured_numbers
from ...atomic_files import write_bytes_atomic
from ...trace.format.codec import decode, encode
from . import brief
from .state_store import StateStore

STATE = "step-metrics"  # the step logs' reader's state in the report's cache
# every measured step's numbers, in the cache's folder: the numbers (a JSON line each, appended), and where
# each step's line lies with its brief, in columns (``brief.Briefs``), written whole each run (bytes as
# the arrays hold them: a warm fleet report reads them back without decoding a number)
NUMBERS, BRIEFS = "step-metrics.rlprof-numbers", "step-metrics.rlprof-briefs"


def measured_steps(root: Path, cache: StateStore | None = None) -> tuple["MeasuredSteps", list[str]]:
    """Every measured step's numbers (steps with a number only) and the warnings of reading them; with a
    ``cache``, only what the logs gained since the last run is read, and only the steps the new lines
    touched are made and added to the store (``MeasuredSteps``)."""
    head = cache.state(STATE) if cache else None
    store = (cache.folder / NUMBERS, cache.folder / BRIEFS) if cache is not None and cache.enabled else None
    kept = _kept(store, head)
    numbers, warnings, state, whole = measured_incrementally(root, head["reader"] if kept else None)
    numbers.pop(None, None)  # iterations before any step was named: no step's row
    if store is not None and not cache.write_error and (state["files"] or kept):
        try:
            if whole or kept is None:
                if kept is not None:
                    kept.close()
                store[0].parent.mkdir(parents=True, exist_ok=True)
                kept = MeasuredSteps(store[0].open("w+b"))
            kept.record(numbers)
            write_bytes_atomic(store[1], kept.to_bytes())
            cache.keep_state(STATE, {"reader": state, "store": _sizes(store)})
            return kept, warnings
        except OSError as e:  # a read-only root: the numbers are kept for this run only
            cache.write_error = cache.write_error or f"{store[0]}: {e.strerror or e}"
    if not whole:  # the new lines' steps alone: the others were in a store this run cannot use
        numbers, warnings, _, _ = measured_incrementally(root, None)
        numbers.pop(None, None)
    return MeasuredSteps(tempfile.TemporaryFile()).record(numbers), warnings


def scratch_steps(records: dict[int, dict[str, Any]]) -> "MeasuredSteps":
    """The measured steps of records read elsewhere (``{step: {rank: StepRecord}}``: the nodes' step logs)."""
    return MeasuredSteps(tempfile.TemporaryFile()).record({step: measured_numbers(ranks) for step, ranks in records.items()})


def _kept(store: tuple[Path, Path] | None, head: Any) -> "MeasuredSteps | None":
    """The store as the cache's state last left it (the same files, the same sizes), else None."""
    if store is None or not isinstance(head, dict) or not isinstance(head.get("store"), list):
        return None
    try:
        if _sizes(store) != head["store"]:
            return None
        return MeasuredSteps.of_bytes(store[1].read_bytes(), store[0].open("a+b"))
    except (OSError, ValueError, KeyError):
        return None


def _sizes(store: tuple[Path, Path]) -> list[int]:
    return [n for path in store for st in [path.stat()] for n in (st.st_ino, st.st_size)]


class MeasuredSteps:
    """Every measured step's numbers below a root, as the store keeps them: a JSON line of numbers per
    step in a file, and per step its place: where its line lies and its brief (``briefs``, columns).
    A step's numbers are read when asked for (``[step]``, ``numbers_at``). So a fleet of replicas reads
    a few arrays per replica and holds them, not every step's numbers."""

    def __init__(self, file: BinaryIO, steps: array | None = None, where: array | None = None,
                 briefs: brief.Briefs | None = None) -> None:
        self._file = file
        self._steps = steps if steps is not None else array("q")  # each place's step
        self._where = where if where is not None else array("q")  # each place's offset and length
        self.briefs = briefs if briefs is not None else brief.Briefs()
        self._index: dict[int, int] | None = None

    def record(self, numbers: dict[int, dict[str, Any]]) -> "MeasuredSteps":
        """Steps' numbers, new or newer (a step measured again has a later line, which counts); itself."""
        self._file.seek(0, os.SEEK_END)
        offset = self._file.tell()
        lines = []
        places = self._places()
        for step, n in sorted(numbers.items()):
            line = encode(n) + b"\n"
            lines.append(line)
            row = measured_row(step, n, "")
            place = places.get(step)
            if place is None:
                places[step] = self.briefs.add(row)
                self._steps.append(step)
                self._where.extend((offset, len(line)))
            else:
                self.briefs.set(place, row)
                self._where[2 * place:2 * place + 2] = array("q", (offset, len(line)))
            offset += len(line)
        self._file.write(b"".join(lines))
        self._file.flush()
        return self

    def to_bytes(self) -> bytes:
        return b"".join([len(self._steps).to_bytes(8, "little"), self._steps.tobytes(), self._where.tobytes(),
                         self.briefs.to_bytes()])

    @classmethod
    def of_bytes(cls, data: bytes, file: BinaryIO) -> "MeasuredSteps":
        count = int.from_bytes(data[:8], "little")
        steps, where = array("q"), array("q")
        steps.frombytes(data[8:8 + 8 * count])
        where.frombytes(data[8 + 8 * count:8 + 24 * count])
        briefs = brief.Briefs.of_bytes(data[8 + 24 * count:])
        if len(steps) != count or len(where) != 2 * count or len(briefs) != count:
            raise ValueError("the measured steps' store is cut short")
        return cls(file, steps, where, briefs)

    def close(self) -> None:
        self._file.close()

    def place(self, step: int) -> int:
        return self._places()[step]

    def numbers_at(self, place: int) -> dict[str, Any]:
        self._file.seek(self._where[2 * place])
        return decode(self._file.read(self._where[2 * place + 1]))

    def _places(self) -> dict[int, int]:
        if self._index is None:
            self._index = {step: k for k, step in enumerate(self._steps)}
        return self._index

    def __getitem__(self, step: int) -> dict[str, Any]:
        return self.numbers_at(self._places()[step])

    def get(self, step: Any, default: Any = None) -> Any:
        return self[step] if step in self else default

    def __contains__(self, step: Any) -> bool:
        return step in self._places()

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(self._steps))

    def __len__(self) -> int:
        return len(self._steps)


def measured_row(global_step: int, numbers: dict[str, Any], folder: str) -> dict[str, Any]:
    """A row for a step that was measured and not traced (``folder``: its server's step-log folder, as the
    report names it)."""
    return {
        "global_step": global_step, "directory": folder, "state": "measured", "engine": None,
        "engine_version": None, "by_stage": None, "trace_bytes": 0, "files": [], "ranks": numbers["ranks"],
        "missing_ranks": [], "unreadable": [], "sources": ["step_metrics"], "without_iterations": [],
        "stages": {s: {k: v for k, v in n.items() if k not in ("p50_ms", "max_ms")} for s, n in
                   numbers["stages"].items()},
        "rank_busy_ms": {}, "slowest_rank_iterations": {}, "straggler": numbers["straggler"],
        "imbalance": numbers["imbalance"], "iterations": numbers["iterations"],
        "iteration_ms_total": numbers["iteration_ms_total"], "mean_ms": numbers["mean_ms"],
        "span_ms": round(1000.0 * (numbers["ended_at"] - numbers["started_at"]), 3), "profiler_pauses": 0,
        "profiler_pause_ms": 0.0, "rank_time": {}, "timeline": [], "stage_operators": {}, "error": None,
        "memory": {}, "traced": False, "measured": numbers, "tail": longest_tail(numbers.get("rollout")),
    }
