"""A step's flight recorder dumps in the report: what triggered each, and what its window holds.

Each dump is listed under its step (``steps[].anomalies[]``: ``anomaly.json``'s fields and its ``path``),
said in one line among the notes, and on the page shown with its window's iterations and the flame view
of its sampled stacks, read from its traces by the same pass as a session's.
"""

from __future__ import annotations

from collections import Counter
from html import escape
from typing import Any

from ...trace.analysis.step_numbers import slowest_iterations, timeline
from ...trace.analysis.trace_stats import TraceJob
from ..execute.passes import Passes
from ..plan.view import AnomalyView, RootView
from . import charts, flame

VIEWS = "_anomaly_views"  # a row's key for the page's views (not in the JSON)


def add_anomalies(row: dict[str, Any], view: RootView, dumps: dict[int, list[AnomalyView]], passes: Passes) -> None:
    """``row["anomalies"]``: the step's dumps (oldest first) as the plan found them (``dumps``: its server's, by
    step); the page's views beside them, their windows' traces read by ``passes``."""
    found = dumps.get(row.get("global_step"), []) if row.get("global_step") is not None else []
    row["anomalies"] = [{**a.data, "path": view.shown(a.data["path"])} for a in found]
    if found:
        row[VIEWS] = [window_view(a.jobs, passes) for a in found]
        for anomaly, shown in zip(row["anomalies"], row[VIEWS]):  # what the report read of the window's traces
            anomaly["window_iterations"] = len(shown["timeline"])


def window_view(jobs: list[TraceJob], passes: Passes) -> dict[str, Any]:
    """The dump's iterations (``[index, stage, ms, batch, rank]``, the slowest rank's per index) and the flame
    view of its samples, from each rank's trace (``jobs``)."""
    stats = passes.traces(jobs, None)
    readable = [st for st in stats if st.error is None]
    iterations = slowest_iterations(readable)
    counts = Counter(it.stage for it in iterations)
    return {"timeline": timeline(iterations), "python": flame.view(flame.stage_python(readable), counts, None, None),
            "errors": [st.error for st in stats if st.error]}


def note(name: str, anomaly: dict[str, Any]) -> str:
    """The anomaly's line among the report's notes."""
    if anomaly.get("error"):
        return f"{name}: flight recorder dump unreadable: {anomaly['path']}: {anomaly['error']}"
    what = anomaly.get("reason") or "?"
    if anomaly.get("stage"):
        what += f" ({anomaly['stage']})"
    measured, against = anomaly.get("duration_ms"), anomaly.get("baseline_ms")
    numbers = "" if measured is None else f" {measured:,.1f} ms" + (
        f" against {against:,.1f} ms (x{anomaly.get('factor') or 0:.1f})" if against else "")
    return f"{name}: anomaly: {what}{numbers}{' (ongoing)' if anomaly.get('ongoing') else ''}: {anomaly['path']}"


# ---- the page ---------------------------------------------------------------------------------
def marker(row: dict[str, Any]) -> str:
    """The step's mark in the steps' table: how many dumps, linked to them."""
    found = row.get("anomalies") or []
    if not found:
        return ""
    reasons = ", ".join(dict.fromkeys(str(a.get("reason")) for a in found))
    return (f" <a class=anomaly href='#anomalies-{escape(str(row['global_step']))}' data-anomalies={len(found)}>"
            f"&#9873; {len(found)} anomal{'y' if len(found) == 1 else 'ies'} ({escape(reasons)})</a>")


def page_part(steps: list[dict[str, Any]], cell: Any, name_cell: Any) -> str:
    """Each step with dumps: each dump's line, its window's iterations and its samples' flame view."""
    marked = [row for row in steps if row.get("anomalies")]
    if not marked:
        return ""
    out = ["<h2>Anomalies (flight recorder)</h2><p class=muted>Written by the engines with no one asking: an "
           "iteration, a gap or a step slow against the engine's own recent past. Each window: the iterations the "
           "recorder kept (the slowest rank's per iteration) and the engine thread's sampled stacks.</p>"]
    for row in marked:
        step = row["global_step"]
        views = row.get(VIEWS) or [{}] * len(row["anomalies"])
        out.append(f"<details id='anomalies-{escape(str(step))}' open><summary>global step {escape(str(step))}: "
                   f"{len(row['anomalies'])} dump(s)</summary>")
        for k, (anomaly, view) in enumerate(zip(row["anomalies"], views)):
            out.append(f"<div class='note bad' data-anomaly='{escape(str(anomaly.get('reason')))}'>"
                       f"{escape(note(f'dump {k + 1}', anomaly))}</div>")
            if view.get("timeline"):
                out.append(charts.timeline(view["timeline"], f"global step {step}, dump {k + 1}: the window's "
                                                             "iterations"))
            out.append(flame.section(view.get("python"), cell, name_cell))
            out += [f"<div class='note bad'>unreadable: {escape(e)}</div>" for e in view.get("errors", [])]
        out.append("</details>")
    return "".join(out)
