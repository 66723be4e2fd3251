"""The frontends' busy periods read back (``steps/requests/<frontend>.jsonl``), and the requests that held a step.

The engine's frontend writes each busy period's longest requests as one line
(``metrics.requests.LongestRequests``); a trainer syncs weights while the engine
has nothing in flight, so a rollout step is one or more whole busy periods, and
each period belongs to the step whose span holds its end (``longest_of``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..metrics.log import ROTATED, SUFFIX
from ..metrics.requests import KEEP, REQUESTS_DIR, BusyPeriod, FinishedRequest
from ..store.layout import STEPS_DIR


def read_periods(root: Any) -> list[BusyPeriod]:
    """Every frontend's busy periods below ``ROOT/steps/requests/`` (rotated files too); a line that is not
    one is skipped, and so is a file that cannot be read (one a live frontend rotated away meanwhile: its
    lines are in the rotated file the next read finds)."""
    folder = Path(root) / STEPS_DIR / REQUESTS_DIR
    if not folder.is_dir():
        return []
    periods = []
    for path in sorted(folder.glob(f"*{ROTATED}")) + sorted(folder.glob(f"*{SUFFIX}")):
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            try:
                periods.append(BusyPeriod.from_json(json.loads(line)))
            except (ValueError, KeyError, TypeError):
                continue
    return periods


def longest_of(periods: list[BusyPeriod], started_at: float, ended_at: float,
               keep: int = KEEP) -> list[FinishedRequest]:
    """The ``keep`` longest requests of the periods that ended within a step's span, longest first."""
    held = [r for p in periods if started_at <= p.ended_at <= ended_at for r in p.longest]
    return sorted(held, key=lambda r: r.seconds, reverse=True)[:keep]


def held_step(periods: list[BusyPeriod], measured: dict[str, Any] | None) -> list[dict[str, Any]] | None:
    """A measured step's longest requests as the report's JSON holds them (``requests``), longest first; None
    for a step the step metrics did not measure."""
    if not measured:
        return None
    return [r.to_json() for r in longest_of(periods, measured["started_at"], measured["ended_at"])]
