"""A step's numbers in brief: what a fleet keeps of each replica-step, a few numbers, not a row.

A brief comes from a traced step's row (``of_row``) or a measured step's numbers (``of_measured``):
``[iterations, iteration_ms_total, mean_ms, span_ms, imbalance, straggler rank, [[stage, *STAGE_KEYS],
...], started_at, generation_ended_at]`` (the last two wall seconds, None where the step logs do not say).
A server's briefs are kept in columns (``Briefs``), which the measured steps' store writes as they are,
and ``ReplicaNumbers`` are made of them when asked for.
"""

from __future__ import annotations

import json
import math
from array import array
from dataclasses import dataclass
from typing import Any

STAGE_KEYS = ("iterations", "mean_ms", "p90_ms", "prefill_tokens", "decode_tokens")
ITERATIONS, BUSY, MEAN, SPAN, IMBALANCE, STRAGGLER, STAGES, STARTED, ENDED = range(9)


def of_row(row: dict[str, Any]) -> list:
    """A step's row (traced, or made from measured numbers) in brief."""
    straggler = row.get("straggler") or {}
    measured = row.get("measured") or {}
    return [row.get("iterations", 0), row.get("iteration_ms_total") or 0.0, row.get("mean_ms"),
            row.get("span_ms") or 0.0, row.get("imbalance"), straggler.get("rank"), _stages(row["stages"]),
            measured.get("started_at"), measured.get("generation_ended_at")]


def of_measured(numbers: dict[str, Any]) -> list:
    """A measured step's numbers (``step_logs.steps.measured_numbers``) in brief, as ``of_row`` gives for
    the row ``measured_rows.measured_row`` makes of them."""
    straggler = numbers.get("straggler") or {}
    return [numbers["iterations"], numbers["iteration_ms_total"] or 0.0, numbers["mean_ms"],
            round(1000.0 * (numbers["ended_at"] - numbers["started_at"]), 3), numbers["imbalance"],
            straggler.get("rank"), _stages(numbers["stages"]), numbers["started_at"],
            numbers.get("generation_ended_at")]


def _stages(stages: dict[str, dict[str, Any]]) -> list:
    return [[stage, *(n.get(k) for k in STAGE_KEYS)] for stage, n in stages.items()]


@dataclass(slots=True)
class ReplicaNumbers:
    """One replica's numbers of one step, as the fleet view shows them; ``as_dict()`` is the shape
    ``--json`` and the CSVs write. Made on demand from the columns (``Briefs``)."""

    name: str
    state: Any
    traced: bool
    directory: Any
    iterations: int
    iteration_ms_total: float
    mean_ms: float | None
    span_ms: float
    stages: Any  # ((stage, *STAGE_KEYS values), ...)
    straggler: Any
    imbalance: Any
    # wall seconds from the step logs: the step's first iteration, and its last one's end (None: not said)
    started_at: float | None = None
    generation_ended_at: float | None = None

    @property
    def busy_pct(self) -> float | None:
        return round(100.0 * self.iteration_ms_total / self.span_ms, 1) if self.span_ms else None

    def stage(self, name: str) -> dict[str, Any]:
        """One stage's numbers (``{}`` where the replica had none of it)."""
        return next((dict(zip(STAGE_KEYS, s[1:])) for s in self.stages if s[0] == name), {})

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "state": self.state, "traced": self.traced, "directory": self.directory,
                "iterations": self.iterations, "iteration_ms_total": self.iteration_ms_total,
                "mean_ms": self.mean_ms, "span_ms": self.span_ms, "busy_pct": self.busy_pct,
                "stages": {s[0]: dict(zip(STAGE_KEYS, s[1:])) for s in self.stages},
                "straggler": self.straggler, "imbalance": self.imbalance, "started_at": self.started_at,
                "generation_ended_at": self.generation_ended_at}


NONE = math.nan  # a number that is None, in the columns
_BASE = 8  # iterations, busy, mean, span, imbalance, straggler (its index in ``ranks``; -1: none), started, ended
_BEGAN, _ENDED = 6, 7  # the generation's start and end in a place's base columns
_WIDTH = len(STAGE_KEYS)
_STAGE_INTS = (0, 3, 4)  # stage columns that do: iterations, prefill and decode tokens


class Briefs:
    """A server's briefs of many steps, a column per number (arrays of doubles, NaN for none): about 130
    bytes a step where a ``ReplicaNumbers`` is about 800, so 64 replicas x 1,000 steps hold a few MB.
    Each step has a place; measured steps share the server's state (``measured``), ``traced`` and
    step-log folder (``folder``), a traced step's own are kept by its place. ``name`` is the replica's."""

    __slots__ = ("name", "folder", "base", "stages", "ranks", "_rank_ids", "traced")

    def __init__(self, name: str = "", folder: str = "") -> None:
        self.name, self.folder = name, folder
        self.base = array("d")
        self.stages: dict[str, array] = {}
        self.ranks: list[Any] = []  # the straggler ranks' names, by the index the base column holds
        self._rank_ids: dict[Any, int] = {}
        self.traced: dict[int, tuple[Any, Any]] = {}  # place -> (state, directory) of a traced step

    def __len__(self) -> int:
        return len(self.base) // _BASE

    def add(self, b: list, traced: tuple[Any, Any] | None = None) -> int:
        """A step's brief as a new place; the place."""
        place = len(self)
        self.base.extend((NONE,) * _BASE)
        for column in self.stages.values():
            column.extend((NONE,) * _WIDTH)
        self.set(place, b)
        if traced is not None:
            self.traced[place] = traced
        return place

    def set(self, place: int, b: list) -> None:
        """The brief at ``place`` (a step measured again: its newer numbers)."""
        straggler = b[STRAGGLER]
        rank = -1 if straggler is None else self._rank_ids.get(straggler)
        if rank is None:
            rank = self._rank_ids[straggler] = len(self.ranks)
            self.ranks.append(straggler)
        times = [_n(b[k]) if len(b) > k else NONE for k in (STARTED, ENDED)]  # a brief may end before them
        self.base[place * _BASE:(place + 1) * _BASE] = array("d", [*map(_n, b[:STRAGGLER]), rank, *times])
        mine = {s[0]: s[1:] for s in b[STAGES]}
        for stage in mine:
            if stage not in self.stages:
                self.stages[stage] = array("d", [NONE]) * (len(self) * _WIDTH)
        for stage, column in self.stages.items():
            values = mine.get(stage)
            column[place * _WIDTH:(place + 1) * _WIDTH] = array(
                "d", map(_n, values) if values is not None else (NONE,) * _WIDTH)

    def busy(self, place: int) -> float:
        return self.base[place * _BASE + 1]

    def generation(self, place: int) -> tuple[float | None, float | None]:
        """When the step's generation began and ended on this replica (wall seconds; None: not said)."""
        at = place * _BASE
        return number_or_none(self.base[at + _BEGAN]), number_or_none(self.base[at + _ENDED])

    def mean(self, place: int) -> float | None:
        value = self.base[place * _BASE + MEAN]
        return None if value != value else value

    def time(self, place: int) -> float | None:
        """What the heat strip colours: the decode time per iteration, else the mean iteration time."""
        decode = self.stages.get("decode")
        value = decode[place * _WIDTH + 1] if decode is not None else NONE
        if value != value:
            value = self.base[place * _BASE + 2]
        return None if value != value else value

    def numbers(self, place: int) -> ReplicaNumbers:
        at = place * _BASE
        iterations, busy, mean, span, imbalance, rank, started, ended = self.base[at:at + _BASE]
        stages = []
        for stage, column in self.stages.items():
            values = column[place * _WIDTH:(place + 1) * _WIDTH]
            if values[0] == values[0]:  # the stage's iterations: NaN where the step had no such stage
                stages.append((stage, *(number_or_none(v, k in _STAGE_INTS) for k, v in enumerate(values))))
        state, directory = self.traced.get(place, ("measured", self.folder))
        return ReplicaNumbers(self.name, state, place in self.traced, directory, number_or_none(iterations, True),
                              busy, number_or_none(mean), span, tuple(stages),
                              self.ranks[int(rank)] if rank >= 0 else None, number_or_none(imbalance),
                              number_or_none(started), number_or_none(ended))

    def to_bytes(self) -> bytes:
        """The columns as they are (measured steps only: a traced step's brief comes from its row)."""
        head = json.dumps({"stages": list(self.stages), "ranks": self.ranks}).encode()
        return b"".join([head, b"\n", self.base.tobytes(), *(c.tobytes() for c in self.stages.values())])

    @classmethod
    def of_bytes(cls, data: bytes) -> "Briefs":
        """``to_bytes`` read back; ``ValueError`` where the bytes are not whole."""
        end = data.index(b"\n")
        head = json.loads(data[:end])
        out = cls()
        out.ranks = list(head["ranks"])
        out._rank_ids = {rank: k for k, rank in enumerate(out.ranks)}
        body = memoryview(data)[end + 1:]
        count, left = divmod(len(body), 8 * (_BASE + _WIDTH * len(head["stages"])))
        if left:
            raise ValueError("briefs cut short")
        out.base.frombytes(body[:8 * _BASE * count])
        at = 8 * _BASE * count
        for stage in head["stages"]:
            column = out.stages[stage] = array("d")
            column.frombytes(body[at:at + 8 * _WIDTH * count])
            at += 8 * _WIDTH * count
        return out


def _n(value: Any) -> float:
    return NONE if value is None else value


def number_or_none(value: float, whole: bool = False) -> Any:
    """A column's number as the brief had it: None for NaN, an integer where ``whole``."""
    if value != value:
        return None
    return int(value) if whole else value
