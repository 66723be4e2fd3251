"""The RL phases a trainer runs between generations, on a live server, against what the caller saw.

The step is named (``/profile_step``) and the trainer's calls follow one at a time, as between two rollouts
(a step of phases alone: no iteration, so the flight recorder neither judges it nor holds later steps against
it), each timed by the client from just before its request to just after its answer: the step's record in
every rank's step log must hold one phase per call, in order, each with the engine's call, starting inside
the client's window and lasting no longer than it. A call the engine makes inside another (the cache flush a
weight update does itself) is the outer one's.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.helpers.flight import mark, step_record


def timed_calls(server, calls: list[tuple[str, dict]]) -> list[tuple[float, float]]:
    """Each ``(path, body)`` posted in turn: the client's window of each (wall seconds), every answer a 200."""
    windows = []
    for path, body in calls:
        before = time.time()
        r = server.post(path, body)
        after = time.time()
        assert r.status_code == 200, (path, r.status_code, r.text)
        windows.append((before, after))
    return windows


def check_phases(server, step: int, calls: list[tuple[str, dict]], expected: list[tuple[str, str]],
                 ranks: int = 1) -> list[dict]:
    """``calls`` in step ``step`` (``step + 1`` ends it) on a server of ``ranks`` ranks; the first rank's phases of
    the step, each rank's ``expected`` (phase, call)."""
    mark(server, step)
    windows = timed_calls(server, calls)
    mark(server, step + 1)
    root = Path(server.trace_dir)
    step_record(root, step)  # written (the first rank's)
    deadline = time.time() + 20
    while True:
        records = sorted((r for path in (root / "steps").glob("*.jsonl") for line in path.read_text().splitlines()
                          for r in [json.loads(line)] if r["global_step"] == step), key=lambda r: r["rank"])
        if len(records) >= ranks or time.time() > deadline:
            break
        time.sleep(0.2)
    assert len(records) == ranks, [r["rank"] for r in records]
    for record in records:
        phases = record.get("phases", [])
        assert [(p["phase"], p["call"]) for p in phases] == expected, (record["rank"], phases)
        for p, (before, after) in zip(phases, windows):
            assert before - 0.01 <= p["started_at"] and p["started_at"] + p["ms"] / 1e3 <= after + 0.01, (
                record["rank"], p, before, after)
            assert p["ms"] <= (after - before) * 1e3 + 10, (record["rank"], p, before, after)
    return records[0]["phases"]
