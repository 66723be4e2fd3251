"""The whole rollout fleet in one report: every replica of every RL step side by side.

An RL step's rollout waits for its slowest replica. A replica is a server,
and a trainer's output holds one or many: verl gives each replica its own
folder (``<save_path>/agent_loop_rollout_replica_<r>/global_step_<N>/``),
``rlprof collect`` writes a folder per server, and servers sharing one
directory write into ``servers/<name>/`` beside the first one
(``store.servers``). ``store.servers.replicas_of`` finds them all below a root,
each named by its identity (its claim or its manifests' ``server``) or by its folder.

With one replica the report is what it always was. With several, each
replica's steps are read as a report of their own (``steps.step_rows``, its
own cache), then put side by side per global step (``fleet_rows``): a step's
row is its slowest replica's (the one with the most iteration time: the one
the trainer waited for), with every replica's numbers beside it
(``replicas``), the slowest named (``slowest_replica``) and the spread
(slowest over the median). Steps only some replicas traced or measured keep
every replica that has them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable

from ..store.servers import Replica
from .cache import StepCache
from .measured_rows import measured_row
from .steps import StepsFound, in_sequence

class ReplicaNumbers:
    """One replica's numbers of one step, as the fleet view shows them. A fleet of 64 replicas x 1,000
    steps holds 64,000 of these at once, so they are slotted objects, not dicts (about a third of the
    memory); ``as_dict()`` is the shape ``--json`` and the CSVs write."""

    __slots__ = ("name", "state", "traced", "directory", "iterations", "iteration_ms_total", "mean_ms",
                 "span_ms", "stages", "straggler", "imbalance")

    def __init__(self, name: str, state: Any, traced: bool, directory: Any, iterations: int, busy: float,
                 mean: float | None, span: float, stages: tuple, straggler: Any, imbalance: Any) -> None:
        self.name, self.state, self.traced, self.directory = name, state, traced, directory
        self.iterations, self.iteration_ms_total, self.mean_ms, self.span_ms = iterations, busy, mean, span
        self.stages = stages  # ((stage, *STAGE_KEYS values), ...)
        self.straggler, self.imbalance = straggler, imbalance

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
                "straggler": self.straggler, "imbalance": self.imbalance}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ReplicaNumbers) and self.as_dict() == other.as_dict()

    def __repr__(self) -> str:
        return f"ReplicaNumbers({self.as_dict()!r})"


STAGE_KEYS = ("iterations", "mean_ms", "p90_ms", "prefill_tokens", "decode_tokens")


def replica_numbers(name: str, row: dict[str, Any]) -> ReplicaNumbers:
    """One replica's numbers of one step, from the step's row."""
    straggler = row.get("straggler") or {}
    return ReplicaNumbers(name, row.get("state"), row.get("traced", True), row.get("directory"),
                          row.get("iterations", 0), row.get("iteration_ms_total") or 0.0, row.get("mean_ms"),
                          row.get("span_ms") or 0.0, _stages(row["stages"]), straggler.get("rank"),
                          row.get("imbalance"))


def measured_replica_numbers(name: str, numbers: dict[str, Any], folder: str) -> ReplicaNumbers:
    """The same for a step only measured, straight from its measured numbers (no row is made: a fleet
    of 64 replicas x 1,000 steps makes full rows only for each step's slowest replica)."""
    straggler = numbers.get("straggler") or {}
    return ReplicaNumbers(name, "measured", False, folder, numbers["iterations"],
                          numbers["iteration_ms_total"] or 0.0, numbers["mean_ms"],
                          round(1000.0 * (numbers["ended_at"] - numbers["started_at"]), 3),
                          _stages(numbers["stages"]), straggler.get("rank"), numbers["imbalance"])


def _stages(stages: dict[str, dict[str, Any]]) -> tuple:
    return tuple((stage, n.get("iterations"), n.get("mean_ms"), n.get("p90_ms"), n.get("prefill_tokens"),
                  n.get("decode_tokens")) for stage, n in stages.items())


def fleet_rows(root: Path, replicas: list[Replica], progress: Callable[[str], None] | None = None, *,
               steps: tuple[int, int] | None = None, use_cache: bool = True,
               keep: tuple[int, ...] = ()) -> dict[str, Any]:
    """``step_rows``' answer for a fleet: one row per global step (its slowest replica's), each with
    ``replicas`` (every replica's numbers), ``slowest_replica`` and ``replica_spread``; each step's
    change is against the step before's slowest replica. Replicas are read one at a time, and a full
    row is made only for each step's slowest, so memory and time grow with the steps' summaries."""
    summaries: dict[int | None, list[ReplicaNumbers]] = {}
    # step -> (its slowest replica's iteration ms, name, the row, or what makes it): a replica's steps are
    # let go once read; only each step's slowest replica's numbers stay until its row is made
    slowest: dict[int | None, tuple[float, str, dict | partial]] = {}
    found_steps: set = set()
    warnings: list[str] = []
    caches = []
    for replica in replicas:
        cache = StepCache(replica.root, enabled=use_cache)
        caches.append(cache)
        found = StepsFound.of(replica.root, cache, steps)
        found_steps.update(found.steps_found)
        warnings += [f"{replica.name}: {w}" for w in found.warnings]
        for step, directory in found.chosen:
            if directory is not None:
                row: dict | partial = found.row(step, directory, progress)
                numbers = replica_numbers(replica.name, row)
            else:
                measured = found.measured[step]
                row = partial(measured_row, step, measured, found.root, found.logs)
                numbers = measured_replica_numbers(replica.name, measured, found.logs)
            summaries.setdefault(step, []).append(numbers)
            total = numbers.iteration_ms_total
            held = slowest.get(step)
            if held is None or total > held[0]:  # a tie keeps the first replica
                slowest[step] = (total, replica.name, row)
        del found
    order = sorted(summaries, key=lambda s: (s is not None, s if s is not None else -1))
    rows = []
    for step in order:
        total, name, row = slowest.pop(step)
        row = row() if isinstance(row, partial) else row
        totals = [n.iteration_ms_total for n in summaries[step] if n.iteration_ms_total]
        median = statistics.median(totals) if totals else 0.0
        row.update(replica=name, replicas=summaries[step], slowest_replica=name,
                   replica_spread=round(total / median, 3) if median else None)
        rows.append(row)
    return {"root": str(root), "steps": in_sequence(rows, keep),
            "steps_found": sorted(found_steps, key=lambda s: (s is not None, s or 0)),
            "warnings": warnings, "replicas": [r.name for r in replicas], "cache": FleetCache(caches)}


@dataclass
class FleetCache:
    """The replicas' caches read as one (what the command says it reused)."""

    caches: list[StepCache]

    @property
    def enabled(self) -> bool:
        return any(c.enabled for c in self.caches)

    @property
    def hits(self) -> int:
        return sum(c.hits for c in self.caches)

    @property
    def misses(self) -> int:
        return sum(c.misses for c in self.caches)

    @property
    def write_error(self) -> str | None:
        return next((c.write_error for c in self.caches if c.write_error), None)


def replica_table(report: dict[str, Any]) -> list[dict[str, Any]]:
    """``replicas.csv``: a row per step, replica and stage."""
    out = []
    for row in report["steps"]:
        for n in row.get("replicas", []):
            base = {"global_step": row["global_step"], "replica": n.name,
                    "slowest": n.name == row.get("slowest_replica"), "state": n.state, "traced": n.traced,
                    "iterations": n.iterations, "iteration_ms_total": n.iteration_ms_total,
                    "mean_ms": n.mean_ms, "busy_pct": n.busy_pct, "straggler": n.straggler,
                    "imbalance": n.imbalance}
            for stage in sorted(n.stages) or [("all",)]:
                out.append({**base, "stage": stage[0],
                            **{f"stage_{k}": v for k, v in zip(STAGE_KEYS, stage[1:])}})
    return out
