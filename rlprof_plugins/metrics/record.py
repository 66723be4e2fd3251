"""The step record: one RL step of one rank, typed once, with its one encoder and one decoder.

Every user of the step metrics reads and writes through these types: the
timer builds a ``StepRecord`` when a step finishes, the log writes it as one
JSON line (``encode``) and keeps the rank's ``RankTotals`` in its state file,
the Prometheus collector reads the state files (``RankTotals.decode``), the
report and ``rlprof collect``'s reader read the lines back (``decode``), and
records of the same step and rank written in two parts (a server restarted
inside a step) add up (``combine``). The keys of both files are spelled in
this module and nowhere else.

Bucketed iteration times (``counts``) use ``BUCKETS_MS``: the upper bounds of
a Prometheus histogram, so p50/p90 come from them and ranks and restarts add
up exactly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .phases import PhaseRecord
from .tail import TailRecord

# upper bounds (ms) of the iteration-time buckets of every record (``counts``); the last is +inf.
BUCKETS_MS = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0,
              float("inf"))


class NotARecord(ValueError):
    """A line or file that is not a whole record (a write cut short, another program's file)."""


def _number(data: dict, key: str, kind: type = float) -> Any:
    value = data.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise NotARecord(f"{key} is not a number: {value!r}")
    return kind(value) if kind is int else value


@dataclass
class StageRecord:
    """One stage's iterations of one step on one rank: count, summed and largest time, the
    bucketed times, tokens and summed batch sizes."""

    iterations: int = 0
    total_ms: float = 0.0
    max_ms: float = 0.0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    batch_sum: int = 0
    counts: list[int] = field(default_factory=lambda: [0] * len(BUCKETS_MS))

    def to_json(self) -> dict[str, Any]:
        return {"iterations": self.iterations, "total_ms": self.total_ms, "max_ms": self.max_ms,
                "prefill_tokens": self.prefill_tokens, "decode_tokens": self.decode_tokens,
                "batch_sum": self.batch_sum, "counts": list(self.counts)}

    def totals_json(self) -> dict[str, Any]:
        """What a rank's running totals keep of a stage (the state file): no largest time or batch."""
        return {"iterations": self.iterations, "total_ms": self.total_ms, "prefill_tokens": self.prefill_tokens,
                "decode_tokens": self.decode_tokens, "counts": list(self.counts)}

    @classmethod
    def from_json(cls, data: Any) -> "StageRecord":
        if not isinstance(data, dict):
            raise NotARecord(f"a stage is not an object: {data!r}")
        counts = data.get("counts", [0] * len(BUCKETS_MS))
        if not isinstance(counts, list) or not all(isinstance(c, int) for c in counts):
            raise NotARecord(f"counts is not a list of integers: {counts!r}")
        return cls(iterations=_number(data, "iterations", int), total_ms=_number(data, "total_ms"),
                   max_ms=_number(data, "max_ms"), prefill_tokens=_number(data, "prefill_tokens", int),
                   decode_tokens=_number(data, "decode_tokens", int), batch_sum=_number(data, "batch_sum", int),
                   counts=list(counts))

    def add(self, other: "StageRecord") -> None:
        """Counts, totals and tokens add up; the largest time is the larger."""
        self.iterations += other.iterations
        self.total_ms = round(self.total_ms + other.total_ms, 3)
        self.max_ms = max(self.max_ms, other.max_ms)
        self.prefill_tokens += other.prefill_tokens
        self.decode_tokens += other.decode_tokens
        self.batch_sum += other.batch_sum
        self.counts = [a + b for a, b in zip(self.counts, other.counts)]


@dataclass
class StepRecord:
    """One finished RL step of one rank: a line of ``steps/<rank>.jsonl``.

    ``global_step`` is None for iterations that ran before any step was named;
    ``step_source`` says where the step came from (``request``,
    ``weight_version``, ``mark_step``, ``verl weights version``); ``started_at``/``ended_at`` are wall
    seconds (``started_at`` the first iteration's start, ``ended_at`` when the step was handed over, which is when
    the next one began, ``last_iteration_at`` its last iteration's end: where the rank's generation ended);
    ``busy_ms`` is the time inside iterations, ``idle_ms`` between them; ``tail`` is how full the
    engine ran and the step's long tail (``tail.TailRecord``; None where the engine did not say its batches);
    ``phases`` the RL phases the rank ran while the step was open (``phases.PhaseRecord``, in order;
    ``phases_dropped`` those past ``phases.MAX_PER_STEP``)."""

    global_step: int | None
    step_source: str | None
    rank: str
    started_at: float
    ended_at: float
    iterations: int
    busy_ms: float
    idle_ms: float
    stages: dict[str, StageRecord]
    tail: TailRecord | None = None
    last_iteration_at: float | None = None
    phases: list[PhaseRecord] = field(default_factory=list)
    phases_dropped: int = 0

    def to_json(self) -> dict[str, Any]:
        out = {"global_step": self.global_step, "step_source": self.step_source, "rank": self.rank,
               "started_at": self.started_at, "ended_at": self.ended_at, "iterations": self.iterations,
               "busy_ms": self.busy_ms, "idle_ms": self.idle_ms,
               "stages": {stage: t.to_json() for stage, t in self.stages.items()}}
        if self.tail is not None:
            out["tail"] = self.tail.to_json()
        if self.last_iteration_at is not None:
            out["last_iteration_at"] = self.last_iteration_at
        if self.phases:
            out["phases"] = [p.to_json() for p in self.phases]
        if self.phases_dropped:
            out["phases_dropped"] = self.phases_dropped
        return out

    def encode(self) -> str:
        """The record as one JSON line (with its newline)."""
        return json.dumps(self.to_json(), separators=(",", ":")) + "\n"

    @classmethod
    def from_json(cls, data: Any) -> "StepRecord":
        if not isinstance(data, dict) or "rank" not in data or "global_step" not in data:
            raise NotARecord("not a step record (no rank or global_step)")
        step = data["global_step"]
        if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
            raise NotARecord(f"global_step is not an integer: {step!r}")
        stages = data.get("stages", {})
        if not isinstance(stages, dict):
            raise NotARecord(f"stages is not an object: {stages!r}")
        return cls(global_step=step, step_source=data.get("step_source"), rank=str(data["rank"]),
                   started_at=_number(data, "started_at"), ended_at=_number(data, "ended_at"),
                   iterations=_number(data, "iterations", int), busy_ms=_number(data, "busy_ms"),
                   idle_ms=_number(data, "idle_ms"),
                   stages={str(stage): StageRecord.from_json(t) for stage, t in stages.items()},
                   tail=TailRecord.from_json(data.get("tail")), last_iteration_at=_optional(data, "last_iteration_at"),
                   phases=[p for p in map(PhaseRecord.from_json, _listed(data.get("phases"))) if p is not None],
                   phases_dropped=_number(data, "phases_dropped", int))

    @classmethod
    def decode(cls, line: str) -> "StepRecord":
        """One line of a step log; ``NotARecord`` for anything else (a torn line)."""
        try:
            data = json.loads(line)
        except ValueError as e:
            raise NotARecord(str(e)) from None
        return cls.from_json(data)

    def combine(self, other: "StepRecord") -> "StepRecord":
        """One step of one rank recorded in two parts (a restart): counts and totals add up."""
        stages = {stage: StageRecord(**{**t.to_json(), "counts": list(t.counts)}) for stage, t in self.stages.items()}
        for stage, t in other.stages.items():
            if stage in stages:
                stages[stage].add(t)
            else:
                stages[stage] = t
        return StepRecord(global_step=self.global_step, step_source=self.step_source, rank=self.rank,
                          started_at=min(self.started_at, other.started_at),
                          ended_at=max(self.ended_at, other.ended_at),
                          iterations=self.iterations + other.iterations,
                          busy_ms=round(self.busy_ms + other.busy_ms, 3),
                          idle_ms=round(self.idle_ms + other.idle_ms, 3), stages=stages,
                          tail=other.tail or self.tail,  # the part the step ended in holds its tail
                          last_iteration_at=max((t for t in (self.last_iteration_at, other.last_iteration_at)
                                                 if t is not None), default=None),
                          phases=sorted(self.phases + other.phases, key=lambda p: p.started_at),
                          phases_dropped=self.phases_dropped + other.phases_dropped)


@dataclass
class RankTotals:
    """A rank's state file (``steps/<rank>.state.json``), what the ``/metrics`` series read: the step
    open now, the newest finished step with a number, and every finished step's totals since start."""

    rank: str
    global_step: Any = None  # the step the rank's iterations count for now
    last_step: int | None = None
    steps: int = 0
    busy_ms: float = 0.0
    idle_ms: float = 0.0
    stages: dict[str, StageRecord] = field(default_factory=dict)
    last_busy_ms: float = 0.0  # the newest finished step's time inside iterations (a fleet's slowest replica)
    last_tail_ms: float | None = None  # the newest finished step's tail (``tail``), where the engine said its batches
    last_tail_share: float | None = None  # ... and its share of the step's span
    anomalies: dict[str, int] = field(default_factory=dict)  # the flight recorder's dumps, "reason/stage": count
    dropped_dumps: dict[str, int] = field(default_factory=dict)  # dumps dropped for want of room, by reason
    phase_ms: dict[str, float] = field(default_factory=dict)  # the RL phases' time (``phases``), by phase
    phase_counts: dict[str, int] = field(default_factory=dict)  # ... and how many ran (kept ones and dropped)

    def count_anomaly(self, reason: str, stage: str | None) -> None:
        key = f"{reason}/{stage or 'all'}"
        self.anomalies[key] = self.anomalies.get(key, 0) + 1

    def count_dropped_dump(self, reason: str) -> None:
        self.dropped_dumps[reason] = self.dropped_dumps.get(reason, 0) + 1

    def add(self, record: StepRecord) -> None:
        self.steps += 1
        self.last_busy_ms = record.busy_ms
        if record.tail is not None:
            self.last_tail_ms, self.last_tail_share = record.tail.tail_ms, round(record.tail.tail_share, 4)
        if record.global_step is not None:
            self.last_step = record.global_step
        self.busy_ms += record.busy_ms
        self.idle_ms += record.idle_ms
        for stage, t in record.stages.items():
            self.stages.setdefault(stage, StageRecord()).add(t)
        for p in record.phases:
            self.phase_ms[p.phase] = round(self.phase_ms.get(p.phase, 0.0) + p.ms, 3)
            self.phase_counts[p.phase] = self.phase_counts.get(p.phase, 0) + 1

    def encode(self) -> str:
        return json.dumps({"rank": self.rank, "global_step": self.global_step, "last_step": self.last_step,
                           "steps": self.steps, "busy_ms": round(self.busy_ms, 3), "idle_ms": round(self.idle_ms, 3),
                           "last_busy_ms": round(self.last_busy_ms, 3), "last_tail_ms": self.last_tail_ms,
                           "last_tail_share": self.last_tail_share, "anomalies": self.anomalies,
                           "dropped_dumps": self.dropped_dumps, "phase_ms": self.phase_ms,
                           "phase_counts": self.phase_counts,
                           "stages": {stage: t.totals_json() for stage, t in self.stages.items()}})

    @classmethod
    def decode(cls, text: str) -> "RankTotals":
        try:
            data = json.loads(text)
        except ValueError as e:
            raise NotARecord(str(e)) from None
        if not isinstance(data, dict) or "rank" not in data:
            raise NotARecord("not a rank's state (no rank)")
        last = data.get("last_step")
        return cls(rank=str(data["rank"]), global_step=data.get("global_step"),
                   last_step=last if isinstance(last, int) and not isinstance(last, bool) else None,
                   steps=_number(data, "steps", int), busy_ms=_number(data, "busy_ms"),
                   idle_ms=_number(data, "idle_ms"), last_busy_ms=_number(data, "last_busy_ms"),
                   last_tail_ms=_optional(data, "last_tail_ms"), last_tail_share=_optional(data, "last_tail_share"),
                   stages={str(s): StageRecord.from_json(t) for s, t in (data.get("stages") or {}).items()},
                   anomalies=_counts(data.get("anomalies")), dropped_dumps=_counts(data.get("dropped_dumps")),
                   phase_ms=_numbers(data.get("phase_ms")),
                   phase_counts=_counts(data.get("phase_counts")))


def _optional(data: dict, key: str) -> float | None:
    """A number a state file may lack (an older file, a step whose engine did not say its batches)."""
    value = data.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _listed(value: Any) -> list:
    return value if isinstance(value, list) else []


def _numbers(value: Any) -> dict[str, float]:
    """A state file's numbers by name (anything else in it read as nothing)."""
    if not isinstance(value, dict):
        return {}
    return {str(k): float(v) for k, v in value.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _counts(value: Any) -> dict[str, int]:
    """A state file's counts by name (anything else in it read as nothing)."""
    if not isinstance(value, dict):
        return {}
    return {str(k): int(v) for k, v in value.items() if isinstance(v, int) and not isinstance(v, bool)}
