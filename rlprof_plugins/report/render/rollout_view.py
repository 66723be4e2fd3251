"""The page's "Rollout steps" section: where each of the newest measured steps' time went.

For the newest ``SHOWN`` measured steps, one bar a step on the rank whose tail was longest: batches at
least half as full as the peak, the tail (``metrics/tail.py``), then the wait for the trainer and the RL
phases (``metrics/phases.py``); a table of the same numbers with the fleet's replica-time lost waiting
(``fleet.replicas_waiting``), the running batch over the newest step, and the requests that held it.
Every number is one the JSON holds under the same step: this module only draws them.
"""

from __future__ import annotations

import json
from html import escape
from typing import Any

from ...metrics.phases import in_order
from . import charts
from .step_section import cell, table
from .summary import step_label

SHOWN = 20  # the newest steps the section shows
WAITING = "waiting for the trainer"  # from the rank's last iteration to its first RL phase after it


def measured(row: dict[str, Any], part: str) -> dict[str, Any]:
    """One part of a step's measured numbers, by rank: ``rollout`` (each rank's tail record) or ``phases`` (its
    RL phases); empty where the step was not measured or has none."""
    return (row.get("measured") or {}).get(part) or {}


def section(steps: list[dict[str, Any]]) -> str:
    """The section, or nothing where no step holds a rank's tail."""
    shown = [row for row in steps if row.get("tail") and measured(row, "rollout")][-SHOWN:]
    if not shown:
        return ""
    fleet = any(row.get("replicas_waiting") for row in shown)
    phased = any(measured(row, "phases").get(row["tail"]["rank"]) for row in shown)
    bars = {}
    for row in shown:
        tail = row["tail"]
        span = measured(row, "rollout")[tail["rank"]]["span_ms"]
        mine = measured(row, "phases").get(tail["rank"]) or {}
        bars[step_label(row["global_step"], row["directory"])] = {
            "full batches": round(max(span - tail["tail_ms"], 0.0), 3), "tail": tail["tail_ms"],
            WAITING: mine.get("after_generation_ms") or 0.0,
            **{phase: t["ms"] for phase, t in (mine.get("totals") or {}).items()}}
    parts = ["full batches", "tail"]
    if phased:
        parts += [WAITING] + in_order({phase for bar in bars.values() for phase in bar} - {*parts, WAITING})
    newest = shown[-1]
    newest_label = step_label(newest["global_step"], newest["directory"])
    tail = newest["tail"]
    record = measured(newest, "rollout")[tail["rank"]]
    tail_from = 1.0 - tail["tail_ms"] / record["span_ms"] if record["span_ms"] else None
    head = ["step", "rank", "peak batch", "generation ms", "tail ms", "tail share", "tail iterations"]
    head += ["waiting for the trainer ms", "RL phases ms"] if phased else []
    head += ["replica-time lost waiting ms", "its share"] if fleet else []
    html = [
        f"<h2 id=rollout>Rollout steps: where {'each step' if phased else 'generation'}'s time went</h2>"
        "<p class=muted>Each step's generation, from its first iteration to its last, on the rank whose tail was "
        "longest: the time the engine ran batches at least half as full as the step's peak, then the tail, where a "
        "few long responses kept it running nearly empty until the last one ended. A long tail is time the trainer "
        "waits on a few requests: partial rollouts, a response length cap or rebalancing prompts across replicas "
        "shorten it."
        + (" After generation, the time the engine waited for the trainer's next call, then the RL phases it ran "
           "before the next step (weight updates, cache resets, pause and resume, sleep and wake-up)." if phased
           else "")
        + (" In a fleet, the replica-time lost is what every replica spent idle from its own last iteration to "
           "the step's last replica's end, and its share of all replicas' time over the step." if fleet else "")
        + "</p>",
        charts.stacked(bars, parts, "each step: full batches, the tail" + (", then the trainer's turn and the "
                                                                          "RL phases" if phased else "")),
        table("id=rollout-steps", head, (_row(row, fleet, phased) for row in reversed(shown))),
        f"<h3>The running batch over {escape(newest_label)}</h3>"
        "<p class=muted>Each rank from its own first iteration to its last; the dashed line is where the tail "
        "began on the rank the step waited on.</p>",
        charts.occupancy({rank: r.get("occupancy") or [] for rank, r in sorted(measured(newest, "rollout").items())},
                         tail_from, f"running batch over {newest_label}"),
        _requests_held(newest, newest_label),
    ]
    return "".join(html)


def _requests_held(row: dict[str, Any], label: str) -> str:
    """The step's longest requests (``requests``, ``metrics/requests.py``), where its frontend followed them."""
    held = row.get("requests") or []
    if not held:
        return ""
    queued = any(r.get("queued_s") is not None for r in held)  # only where the engine measures it
    head = ["request", "seconds", "output tokens", "prompt tokens", "first token s"] + (["queued s"] if queued else [])
    rows = []
    for k, r in enumerate(held):
        at = f"requests.{k}"
        rows.append(f"<tr data-step='{json.dumps(row['global_step'])}'><td class='name nw' "
                    f"data-field={at}.request_id data-value='{escape(json.dumps(r['request_id']))}'>"
                    f"{escape(str(r['request_id']))}</td>"
                    + cell(r["seconds"], f"{at}.seconds") + cell(r["output_tokens"], f"{at}.output_tokens")
                    + cell(r["prompt_tokens"], f"{at}.prompt_tokens") + cell(r["first_token_s"], f"{at}.first_token_s")
                    + (cell(r["queued_s"], f"{at}.queued_s") if queued else "") + "</tr>")
    return (f"<h3>The requests that held {escape(label)}</h3>"
            "<p class=muted>The longest requests of the step, end to end, as the server's frontend timed them: the "
            "first is the one the step's last iterations ran for.</p>"
            + table("id=requests-held", head, rows))


def _row(row: dict[str, Any], fleet: bool, phased: bool) -> str:
    tail = row["tail"]
    record = measured(row, "rollout")[tail["rank"]]
    cells = [f"<td data-field=global_step data-value='{json.dumps(row['global_step'])}'>"
             f"{escape(str(row['global_step']))}</td>",
             f"<td class='name nw' data-field=tail.rank data-value='{escape(json.dumps(tail['rank']))}'>"
             f"{escape(tail['rank'])}</td>",
             cell(tail["peak_batch"], "tail.peak_batch"),
             cell(record["span_ms"], f"measured.rollout.{tail['rank']}.span_ms"),
             cell(tail["tail_ms"], "tail.tail_ms"), cell(tail["share_pct"], "tail.share_pct", unit="%"),
             cell(tail["tail_iterations"], "tail.tail_iterations")]
    if phased:
        mine, at = measured(row, "phases").get(tail["rank"]) or {}, f"measured.phases.{tail['rank']}"
        cells += [cell(mine.get("after_generation_ms"), f"{at}.after_generation_ms"),
                  cell(mine.get("total_ms"), f"{at}.total_ms")]
    if fleet:
        waiting = row.get("replicas_waiting") or {}
        cells += [cell(waiting.get("lost_ms"), "replicas_waiting.lost_ms"),
                  cell(waiting.get("share_pct"), "replicas_waiting.share_pct", unit="%")]
    return f"<tr data-step='{json.dumps(row['global_step'])}'>" + "".join(cells) + "</tr>"
