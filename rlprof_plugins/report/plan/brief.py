"""A step's numbers in brief: what a fleet keeps of each replica-step, a few numbers, not a row.

A brief is taken from a step's row (a traced step's, or the one a measured step's numbers make): its
iterations, time in iterations, mean iteration, span, imbalance, straggler rank, each stage's
``STAGE_KEYS``, and when its generation began and ended (wall seconds, where the step logs say). A
server's briefs are kept in columns (``Briefs``), which the measured steps' store writes as they are; a
replica-step's numbers are made of them when asked for (``Briefs.numbers``).
"""

from __future__ import annotations

import json
import math
from array import array
from typing import Any

STAGE_KEYS = ("iterations", "mean_ms", "p90_ms", "prefill_tokens", "decode_tokens")

NONE = math.nan  # a number that is None, in the columns
_BASE = 8  # iterations, busy, mean, span, imbalance, straggler (its index in ``ranks``; -1: none), started, ended
_BUSY, _MEAN, _BEGAN, _ENDED = 1, 2, 6, 7  # their places in a step's base columns
_WIDTH = len(STAGE_KEYS)
_STAGE_INTS = ("iterations", "prefill_tokens", "decode_tokens")  # stage columns that count


class Briefs:
    """A server's briefs of many steps, a column per number (arrays of doubles, NaN for none): a fleet of
    many replicas and steps holds a few numbers per replica-step, not an object with its dict of stages.
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

    def add(self, row: dict[str, Any], traced: tuple[Any, Any] | None = None) -> int:
        """A step's row in brief as a new place; the place."""
        place = len(self)
        self.base.extend((NONE,) * _BASE)
        for column in self.stages.values():
            column.extend((NONE,) * _WIDTH)
        self.set(place, row)
        if traced is not None:
            self.traced[place] = traced
        return place

    def set(self, place: int, row: dict[str, Any]) -> None:
        """The brief of ``row`` at ``place`` (a step measured again: its newer numbers)."""
        straggler = (row.get("straggler") or {}).get("rank")
        rank = -1 if straggler is None else self._rank_ids.get(straggler)
        if rank is None:
            rank = self._rank_ids[straggler] = len(self.ranks)
            self.ranks.append(straggler)
        measured = row.get("measured") or {}
        self.base[place * _BASE:(place + 1) * _BASE] = array("d", [
            *map(_n, (row.get("iterations", 0), row.get("iteration_ms_total") or 0.0, row.get("mean_ms"),
                      row.get("span_ms") or 0.0, row.get("imbalance"))),
            rank, _n(measured.get("started_at")), _n(measured.get("generation_ended_at"))])
        mine = row["stages"]
        for stage in mine:
            if stage not in self.stages:
                self.stages[stage] = array("d", [NONE]) * (len(self) * _WIDTH)
        for stage, column in self.stages.items():
            values = [mine[stage].get(k) for k in STAGE_KEYS] if stage in mine else None
            column[place * _WIDTH:(place + 1) * _WIDTH] = array(
                "d", map(_n, values) if values is not None else (NONE,) * _WIDTH)

    def busy(self, place: int) -> float:
        return self.base[place * _BASE + _BUSY]

    def generation(self, place: int) -> tuple[float | None, float | None]:
        """When the step's generation began and ended on this replica (wall seconds; None: not said)."""
        at = place * _BASE
        return number_or_none(self.base[at + _BEGAN]), number_or_none(self.base[at + _ENDED])

    def mean(self, place: int) -> float | None:
        return number_or_none(self.base[place * _BASE + _MEAN])

    def time(self, place: int) -> float | None:
        """What the heat strip colours: the decode time per iteration, else the mean iteration time."""
        decode = self.stages.get("decode")
        value = decode[place * _WIDTH + 1] if decode is not None else NONE
        if value != value:
            value = self.base[place * _BASE + _MEAN]
        return None if value != value else value

    def numbers(self, place: int) -> dict[str, Any]:
        """The replica's numbers of the step at ``place``, as ``--json`` writes them (``steps[].replicas[]``)."""
        at = place * _BASE
        iterations, busy, mean, span, imbalance, rank, started, ended = self.base[at:at + _BASE]
        stages = {}
        for stage, column in self.stages.items():
            values = column[place * _WIDTH:(place + 1) * _WIDTH]
            if values[0] == values[0]:  # the stage's iterations: NaN where the step had no such stage
                stages[stage] = {k: number_or_none(v, k in _STAGE_INTS) for k, v in zip(STAGE_KEYS, values)}
        state, directory = self.traced.get(place, ("measured", self.folder))
        return {"name": self.name, "state": state, "traced": place in self.traced, "directory": directory,
                "iterations": number_or_none(iterations, True), "iteration_ms_total": busy,
                "mean_ms": number_or_none(mean), "span_ms": span,
                "busy_pct": round(100.0 * busy / span, 1) if span else None, "stages": stages,
                "straggler": self.ranks[int(rank)] if rank >= 0 else None, "imbalance": number_or_none(imbalance),
                "started_at": number_or_none(started), "generation_ended_at": number_or_none(ended)}

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
