"""The whole rollout fleet in one report: every replica of every RL step side by side.

An RL step's rollout waits for its slowest replica. A replica is a server,
and a trainer's output holds one or many: verl gives each replica its own
folder (``<save_path>/agent_loop_rollout_replica_<r>/global_step_<N>/``),
``rlprof collect`` writes a folder per server, and servers sharing one
directory write into ``servers/<name>/`` beside the first one
(``store.servers``). ``store.servers.replicas_of`` finds them all below a root,
each named by its identity (its claim or its manifests' ``server``) or by its folder.

With one replica the report is what it always was. With several, each
replica's steps are read as a report of their own (``steps.ServerSteps``),
then put side by side per global step (``fleet_rows``): a step's
row is its slowest replica's (the one with the most iteration time: the one
the trainer waited for), with every replica's numbers beside it
(``replicas``), the slowest named (``slowest_replica``) and the spread
(slowest over the median). Steps only some replicas traced or measured keep
every replica that has them.

Replicas are ranked on one figure that means the same for each (``Ranking``,
named in ``ranked_by``): the measured step (every iteration of the step, from
the step logs) where every replica has one; else the traced windows, totals
where they hold as many iterations, else their mean iteration; a traced window
(which ``max_iterations`` may cut short) is never ranked against a whole
measured step: where only some replicas have either, the mean iteration
ranks them.
"""

from __future__ import annotations

import statistics
from array import array
from functools import partial
from typing import Any, Callable, Iterator

from ..plan import brief
from ..plan.brief import STAGE_KEYS, Briefs, ReplicaNumbers
from ..plan.measured_rows import MeasuredSteps, measured_row
from ..execute.passes import Passes
from ..plan.view import RootView
from ...metrics.requests import BusyPeriod
from ...step_logs.requests import held_step
from .steps import ServerSteps, in_sequence


def replica_numbers(name: str, row: dict[str, Any]) -> ReplicaNumbers:
    """One replica's numbers of one step, from the step's row."""
    return _numbers(name, row.get("state"), row.get("traced", True), row.get("directory"), brief.of_row(row))


def measured_replica_numbers(name: str, numbers: dict[str, Any], folder: str) -> ReplicaNumbers:
    """The same for a step only measured, straight from its measured numbers (no row is made)."""
    return _numbers(name, "measured", False, folder, brief.of_measured(numbers))


def _numbers(name: str, state: Any, traced: bool, directory: Any, b: list) -> ReplicaNumbers:
    return ReplicaNumbers(name, state, traced, directory, b[brief.ITERATIONS], b[brief.BUSY], b[brief.MEAN],
                          b[brief.SPAN], tuple(tuple(s) for s in b[brief.STAGES]), b[brief.STRAGGLER],
                          b[brief.IMBALANCE], b[brief.STARTED], b[brief.ENDED])


class StepReplicas:
    """Every replica's numbers of one step: where each lies in its replica's columns. Iterating makes
    the ``ReplicaNumbers``; ``times()`` and ``totals()`` read the columns alone (the heat strip, the
    spread)."""

    __slots__ = ("_columns", "_replicas", "_places")

    def __init__(self, columns: list[Any]) -> None:
        self._columns = columns
        self._replicas, self._places = array("H"), array("I")

    def add(self, replica: int, place: int) -> None:
        self._replicas.append(replica)
        self._places.append(place)

    def __len__(self) -> int:
        return len(self._replicas)

    def __iter__(self) -> Iterator[ReplicaNumbers]:
        for r, place in zip(self._replicas, self._places):
            yield self._columns[r].numbers(place)

    def times(self) -> Iterator[tuple[str, float | None]]:
        for r, place in zip(self._replicas, self._places):
            columns = self._columns[r]
            yield columns.name, columns.time(place)

    def totals(self) -> list[float]:
        return [self._columns[r].busy(place) for r, place in zip(self._replicas, self._places)]

    def names(self) -> list[str]:
        return [self._columns[r].name for r in self._replicas]

    def generations(self) -> list[tuple[str, float | None, float | None]]:
        """Each replica's name and when its generation of the step began and ended (``Briefs.generation``)."""
        return [(self._columns[r].name, *self._columns[r].generation(place))
                for r, place in zip(self._replicas, self._places)]


class PageBriefs:
    """What the page needs of a replica's briefs once it is read: each step's heat-strip time and
    iteration time (16 bytes a step), and the numbers of its newest steps (the page's replica section
    lists no more). The report without ``--json`` or ``--csv`` keeps these, not the columns, so its
    memory stays flat in replicas and steps."""

    __slots__ = ("name", "_times", "_busy", "_generations", "_numbers")

    def __init__(self, briefs: Briefs, newest: list[int]) -> None:
        self.name = briefs.name
        self._times, self._busy = briefs.times(), briefs.busies()
        self._generations = briefs.generations()
        self._numbers = {place: briefs.numbers(place) for place in newest}

    def generation(self, place: int) -> tuple[float | None, float | None]:
        return brief.number_or_none(self._generations[0][place]), brief.number_or_none(self._generations[1][place])

    def time(self, place: int) -> float | None:
        value = self._times[place]
        return None if value != value else value

    def busy(self, place: int) -> float:
        return self._busy[place]

    def numbers(self, place: int) -> ReplicaNumbers:
        try:
            return self._numbers[place]
        except KeyError:
            raise LookupError(f"{self.name}: only its newest steps' numbers are kept for the page "
                              "(every replica's numbers: --json or --csv)") from None


def fleet_rows(view: RootView, passes: Passes, progress: Callable[[str], None] | None = None,
               *, keep: tuple[int, ...] = (), every_number: bool = True, newest: int = 20) -> dict[str, Any]:
    """``step_rows``' answer for a fleet: one row per global step (its slowest replica's), each with
    ``replicas`` (every replica's numbers), ``slowest_replica`` and ``replica_spread``; each step's
    change is against the step before's slowest replica. Replicas are read one at a time, each step
    of each kept in brief (``brief.Briefs``: the measured steps' as their store kept them), and a full
    row is made only for each step's slowest. Without ``every_number`` (a page alone), a replica once
    read keeps what the page needs (``PageBriefs``: every step's time, its ``newest`` steps' numbers),
    so memory stays flat in replicas and steps; with it (``--json``, ``--csv``), the briefs stay, about
    130 bytes a replica-step."""
    columns: list[Briefs | PageBriefs] = []
    per_step: dict[int | None, StepReplicas] = {}
    # step -> its replicas' figures and, per figure, the slowest replica's row (or what makes it): only
    # those rows (or the places of their numbers) stay until the step's row is made
    slowest: dict[int | None, Ranking] = {}
    found_steps: set = set()
    shared: dict[tuple, list[str]] = {}  # the rows' rank lists: a fleet's replicas name the same ranks
    warnings: list[str] = []
    # each replica-step that failed or lost a file: a step's row is its slowest replica's, so the others'
    # are named apart (``build``), never dropped
    problems: list[dict[str, Any]] = []
    for index, replica in enumerate(view.servers):
        found = ServerSteps(view, replica, passes)
        found_steps.update(found.steps_found)
        warnings += [f"{replica.name}: {w}" for w in found.warnings]
        measured = found.measured
        mine = measured.briefs  # the measured steps' briefs, as the store kept them; traced steps join them
        mine.name, mine.folder = replica.name, found.logs
        columns.append(mine)
        placed = []  # each chosen step's place, in step order
        for step, directory in found.chosen:
            if directory is not None:
                row: dict | partial = found.row(step, directory, progress)
                place = mine.add(brief.of_row(row), (row.get("state"), row.get("directory")))
                if row.get("error") or row.get("unreadable"):
                    problems.append({"global_step": step, "replica": replica.name, "state": row.get("state"),
                                     "directory": row.get("directory"), "error": row.get("error"),
                                     "unreadable": list(row.get("unreadable") or [])})
            else:
                place = measured.place(step)
                row = partial(_measured_row, measured, place, step, found.logs, shared, every_number, found.periods)
            at = per_step.get(step)
            if at is None:
                at = per_step[step] = StepReplicas(columns)
            at.add(index, place)
            placed.append(place)
            if directory is not None:
                traced = (row.get("iteration_ms_total") or 0.0, row.get("iterations") or 0, row.get("mean_ms"))
                numbers = row.get("measured") or {}
                whole = (numbers.get("iteration_ms_total"), numbers.get("mean_ms"))
            else:
                traced, whole = None, (mine.busy(place), mine.mean(place))
            slowest.setdefault(step, Ranking()).offer(replica.name, row, traced, whole)
        if not every_number:  # the replica's own newest steps hold every newest step of the fleet it has
            columns[index] = PageBriefs(mine, placed[-newest:] if newest else [])
            measured.forget_briefs()
        del found, measured, mine
    order = sorted(per_step, key=lambda s: (s is not None, s if s is not None else -1))
    rows = []
    for step in order:
        by, (total, name, row), figures = slowest.pop(step).choice()
        row = row() if isinstance(row, partial) else row
        totals = [t for t in figures if t]
        median = statistics.median(totals) if totals else 0.0
        replicas_of_step = per_step.pop(step)
        row.update(replica=name, replicas=replicas_of_step, slowest_replica=name, ranked_by=by,
                   replica_spread=round(total / median, 3) if median else None,
                   replicas_waiting=replicas_waiting(replicas_of_step.generations()))
        rows.append(row)
    return {"root": view.root, "steps": in_sequence(rows, keep),
            "steps_found": sorted(found_steps, key=lambda s: (s is not None, s or 0)),
            "warnings": warnings, "replicas": [r.name for r in view.servers], "replica_problems": problems}


RANKED_BY = {"measured": "measured step (ms in iterations)", "traced": "traced window (ms in iterations)",
             "traced_mean": "traced mean iteration (ms)", "mean": "mean iteration (ms)"}


class Ranking:
    """One step's replicas, ranked on a figure that means the same for each: every replica's figures
    (a few floats each) and, per figure, the slowest replica's row so far (a tie keeps the first)."""

    __slots__ = ("replicas", "figures", "iteration_counts", "best")

    def __init__(self) -> None:
        self.replicas = 0
        self.figures: dict[str, list[float]] = {key: [] for key in RANKED_BY}
        self.iteration_counts: set[int] = set()
        self.best: dict[str, tuple[float, str, Any]] = {}

    def offer(self, name: str, row: Any, traced: tuple[float, int, float | None] | None,
              whole: tuple[float | None, float | None]) -> None:
        """A replica's figures: ``traced`` (its traced window's ms in iterations, iterations and mean
        iteration; None: not traced), ``whole`` (its measured step's ms in iterations and mean iteration;
        None each where it has none)."""
        self.replicas += 1
        total, mean = whole
        if total is not None:
            self._add("measured", total, name, row)
        if traced is not None:
            self.iteration_counts.add(traced[1])
            self._add("traced", traced[0], name, row)
            if traced[2] is not None:
                self._add("traced_mean", traced[2], name, row)
        mean = mean if total is not None else traced[2] if traced is not None else None
        if mean is not None:
            self._add("mean", mean, name, row)

    def _add(self, key: str, value: float, name: str, row: Any) -> None:
        self.figures[key].append(value)
        held = self.best.get(key)
        if held is None or value > held[0]:
            self.best[key] = (value, name, row)

    def choice(self) -> tuple[str, tuple[float, str, Any], list[float]]:
        """``(ranked_by, (figure, slowest replica, its row), every replica's figure)``."""
        n = self.replicas
        if len(self.figures["measured"]) == n:
            key = "measured"
        elif len(self.figures["traced"]) == n and len(self.iteration_counts) == 1:
            key = "traced"
        elif len(self.figures["traced_mean"]) == n:
            key = "traced_mean"
        elif self.figures["mean"]:
            key = "mean"
        else:  # no replica ran an iteration: the figure some have (a traced window's total is always there)
            key = "traced" if self.best.get("traced") else "measured"
        return RANKED_BY[key], self.best[key], self.figures[key]


def _measured_row(measured: MeasuredSteps, place: int, step: int, folder: str,
                  shared: dict[tuple, list[str]], every_number: bool, periods: list[BusyPeriod]) -> dict[str, Any]:
    """A step's row made from its slowest replica's measured numbers. The page alone (not ``every_number``)
    shows the row's own numbers, not the measured ones it carries (``measured``: the numbers whole, larger
    than the row), so those are not kept; rows naming the same ranks share one list."""
    numbers = measured.numbers_at(place)
    numbers["ranks"] = shared.setdefault(tuple(numbers["ranks"]), numbers["ranks"])
    row = measured_row(step, numbers, folder)
    row["requests"] = held_step(periods, numbers)
    if not every_number:
        row["measured"] = None
    return row


def replicas_waiting(replicas: list[tuple[str, float | None, float | None]]) -> dict[str, Any] | None:
    """The replica-time a step's fleet lost waiting for its last replica: each replica sits idle from its own
    last iteration to the step's end (the last replica's), since the trainer waits for them all. ``lost_ms`` is
    the sum over replicas, ``share_pct`` its share of replicas x the step's span (the first replica's first
    iteration to the step's end), ``ends_ms`` each replica's generation end after the step's start, and
    ``last`` the replica the step waited for. None where fewer than two replicas' step logs say when their
    generation ended. ``replicas``: each one's name and when its generation began and ended (wall seconds)."""
    timed = [(name, began, ended) for name, began, ended in replicas if began is not None and ended is not None]
    if len(timed) < 2:
        return None
    end = max(ended for _, _, ended in timed)
    start = min(began for _, began, _ in timed)
    lost = sum(end - ended for _, _, ended in timed)
    span = end - start
    last = max(timed, key=lambda t: (t[2], t[0]))[0]
    return {"lost_ms": round(1000.0 * lost, 3),
            "share_pct": round(100.0 * lost / (len(timed) * span), 1) if span > 0 else None,
            "span_ms": round(1000.0 * span, 3), "last": last,
            "ends_ms": {name: round(1000.0 * (ended - start), 3) for name, _, ended in timed}}


def replica_table(report: dict[str, Any]) -> list[dict[str, Any]]:
    """``replicas.csv``: a row per step, replica and stage."""
    out = []
    for row in report["steps"]:
        waiting = row.get("replicas_waiting") or {}
        for n in row.get("replicas", []):
            end = waiting.get("ends_ms", {}).get(n.name)
            base = {"global_step": row["global_step"], "replica": n.name,
                    "slowest": n.name == row.get("slowest_replica"), "state": n.state, "traced": n.traced,
                    "waited_ms": None if end is None else round(waiting["span_ms"] - end, 3),
                    "iterations": n.iterations, "iteration_ms_total": n.iteration_ms_total,
                    "mean_ms": n.mean_ms, "busy_pct": n.busy_pct, "straggler": n.straggler,
                    "imbalance": n.imbalance}
            for stage in sorted(n.stages) or [("all",)]:
                out.append({**base, "stage": stage[0],
                            **{f"stage_{k}": v for k, v in zip(STAGE_KEYS, stage[1:])}})
    return out
