"""The whole rollout fleet in one report: every replica of every RL step side by side.

A step's rollout waits for its slowest replica (a server: ``store.servers.replicas_of`` finds them).
Each replica's steps are read on their own (``steps.ServerSteps``) and set side by side per global step
(``fleet_rows``): a step's row is its slowest replica's, with every replica's numbers beside it, the
slowest named and the spread (slowest over the median).

Replicas are ranked on a figure that means the same for each (``Ranking``, named in ``ranked_by``): the
measured step where every replica has one; else the traced windows, their totals where they hold as many
iterations, else their mean iteration. A traced window (which ``max_iterations`` may cut short) is never
ranked against a whole measured step: where only some replicas have either, the mean iteration ranks them.
"""

from __future__ import annotations

import statistics
from array import array
from functools import partial
from typing import Any, Callable, Iterator

from ..plan.brief import Briefs
from ..plan.measured_rows import MeasuredSteps, measured_row
from ..execute.passes import Passes
from ..plan.view import RootView
from ...metrics.requests import BusyPeriod
from ...step_logs.requests import held_step
from .steps import ServerSteps, in_sequence


class StepReplicas:
    """Every replica's numbers of one step: where each lies in its replica's columns. Iterating makes
    each replica's numbers (``Briefs.numbers``); ``times()`` reads the columns alone (the heat strip)."""

    __slots__ = ("_columns", "_replicas", "_places")

    def __init__(self, columns: list[Any]) -> None:
        self._columns = columns
        self._replicas, self._places = array("H"), array("I")

    def add(self, replica: int, place: int) -> None:
        self._replicas.append(replica)
        self._places.append(place)

    def __len__(self) -> int:
        return len(self._replicas)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for r, place in zip(self._replicas, self._places):
            yield self._columns[r].numbers(place)

    def times(self) -> Iterator[tuple[str, float | None]]:
        for r, place in zip(self._replicas, self._places):
            yield self._columns[r].name, self._columns[r].time(place)

    def names(self) -> list[str]:
        return [self._columns[r].name for r in self._replicas]

    def generations(self) -> list[tuple[str, float | None, float | None]]:
        """Each replica's name and when its generation of the step began and ended (``Briefs.generation``)."""
        return [(self._columns[r].name, *self._columns[r].generation(place))
                for r, place in zip(self._replicas, self._places)]


def fleet_rows(view: RootView, passes: Passes, progress: Callable[[str], None] | None = None,
               *, keep: tuple[int, ...] = (), every_number: bool = True) -> dict[str, Any]:
    """``steps.server_rows``' answer for a fleet: one row per global step (its slowest replica's), each with
    ``replicas`` (every replica's numbers), ``slowest_replica`` and ``replica_spread``; each step's
    change is against the step before's slowest replica. Replicas are read one at a time, each step
    of each kept in brief (``Briefs``: the measured steps' as their store kept them), and a full
    row is made only for each step's slowest. Without ``every_number`` (a page alone) those rows do not
    keep the measured numbers they were made of."""
    columns: list[Briefs] = []
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
        found_steps.update(replica.steps_found)
        warnings += [f"{replica.name}: {w}" for w in replica.warnings]
        measured = replica.measured
        mine = measured.briefs  # the measured steps' briefs, as the store kept them; traced steps join them
        mine.name, mine.folder = replica.name, found.logs
        columns.append(mine)
        for step, directory in found.chosen:
            if directory is not None:
                row: dict | partial = found.row(step, directory, progress)
                place = mine.add(row, (row.get("state"), row.get("directory")))
                if row.get("error") or row.get("unreadable"):
                    problems.append({"global_step": step, "replica": replica.name, "state": row.get("state"),
                                     "directory": row.get("directory"), "error": row.get("error"),
                                     "unreadable": list(row.get("unreadable") or [])})
                traced = (row.get("iteration_ms_total") or 0.0, row.get("iterations") or 0, row.get("mean_ms"))
                numbers = row.get("measured") or {}
                whole = (numbers.get("iteration_ms_total"), numbers.get("mean_ms"))
            else:
                place = measured.place(step)
                row = partial(_measured_row, measured, place, step, found.logs, shared, every_number, replica.periods)
                traced, whole = None, (mine.busy(place), mine.mean(place))
            per_step.setdefault(step, StepReplicas(columns)).add(index, place)
            slowest.setdefault(step, Ranking()).offer(replica.name, row, traced, whole)
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
        if traced is not None:
            self.iteration_counts.add(traced[1])
        window, window_mean = traced[0] if traced else None, traced[2] if traced else None
        offered = {"measured": total, "traced": window, "traced_mean": window_mean,
                   "mean": mean if total is not None else window_mean}
        for key, value in offered.items():
            if value is not None:
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
    start, end = min(began for _, began, _ in timed), max(ended for _, _, ended in timed)
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
            end = waiting.get("ends_ms", {}).get(n["name"])
            base = {"global_step": row["global_step"], "replica": n["name"],
                    "slowest": n["name"] == row.get("slowest_replica"), "state": n["state"], "traced": n["traced"],
                    "waited_ms": None if end is None else round(waiting["span_ms"] - end, 3),
                    **{k: n[k] for k in ("iterations", "iteration_ms_total", "mean_ms", "busy_pct", "straggler",
                                         "imbalance")}}
            for stage, numbers in sorted(n["stages"].items()) or [("all", {})]:
                out.append({**base, "stage": stage, **{f"stage_{k}": v for k, v in numbers.items()}})
    return out
