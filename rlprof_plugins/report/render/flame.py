"""The flame view per stage: a step's Python functions by self and total time, and their call tree.

From either kind of Python stacks a trace holds (``trace.analysis.python_stacks``: torch's exact events
or rlprof's samples), summed over the step's ranks: per stage the busiest functions by self time, per
iteration against the step compared with, and the call tree as an icicle on the page. Sampled times are
samples x the time between samples, so steps sampled at other rates still compare. In ``--json``:
``steps[].python`` (docs/report.md); ``python.csv`` lists the functions.
"""

from __future__ import annotations

from html import escape
from typing import Any, Iterable

from ...trace.analysis.python_stacks import merged
from ...trace.analysis.step_numbers import BETWEEN, change_pct

TOP_FUNCTIONS = 25
ICICLE_DEPTH = 14  # rows of the icicle (deeper frames are in the table)


def stage_python(stats: Iterable[Any]) -> dict[str, Any] | None:
    """The step's Python frames per stage, summed over its traces (``TraceStats.python``); None without."""
    parts = [st.python for st in stats if st.python]
    if not parts:
        return None
    modes = {st.python_stacks for st in stats if st.python_stacks}
    stages = merged(parts)
    return {"mode": "exact" if "exact" in modes else "sampled",
            "stages": {stage: {"self": _ms(n["self"]), "total": _ms(n["total"]), "tree": _tree_ms(n["tree"])}
                       for stage, n in stages.items()}}


def _ms(times: dict[str, float]) -> dict[str, float]:
    return {name: round(us / 1000.0, 3) for name, us in times.items()}


def _tree_ms(node: dict[str, Any]) -> dict[str, Any]:
    return {"name": node["name"], "ms": round(node["us"] / 1000.0, 3),
            "children": [_tree_ms(c) for c in node["children"]]}


def view(now: dict[str, Any] | None, counts: dict[str, int], before: dict[str, Any] | None,
         before_counts: dict[str, int] | None) -> dict[str, Any] | None:
    """The step's flame view (see the module), its functions against ``before`` (the compared step's
    ``stage_python``; None: nothing to compare)."""
    if not now:
        return None
    before_stages = (before or {}).get("stages", {})
    before_counts = before_counts or {}
    stages = {}
    for stage, numbers in sorted(now["stages"].items(), key=lambda kv: (kv[0] == BETWEEN, kv[0])):
        count = counts.get(stage) if stage != BETWEEN else None
        earlier = before_stages.get(stage)
        count_before = before_counts.get(stage) if stage != BETWEEN else None
        whole = numbers["tree"]["ms"] or sum(numbers["self"].values()) or 0.0
        rows = []
        for name, self_ms in sorted(numbers["self"].items(), key=lambda kv: -kv[1])[:TOP_FUNCTIONS]:
            per = round(self_ms / count, 4) if count else None
            was = (earlier or {}).get("self", {}).get(name)
            per_before = round(was / count_before, 4) if was is not None and count_before else None
            status = (None if before is None or stage == BETWEEN
                      else "stage new" if earlier is None else "new" if was is None else None)
            rows.append({"name": name, "self_ms": self_ms, "total_ms": numbers["total"].get(name, self_ms),
                         "self_share_pct": round(100.0 * self_ms / whole, 1) if whole else None,
                         "self_per_iteration_ms": per,
                         "total_per_iteration_ms": round(numbers["total"].get(name, self_ms) / count, 4) if count
                         else None,
                         "before_self_per_iteration_ms": per_before, "change_pct": change_pct(per_before, per),
                         "status": status})
        stages[stage] = {"iterations": count, "ms": round(whole, 3), "functions": rows, "tree": numbers["tree"]}
    return {"mode": now["mode"], "stages": stages}


def csv_rows(step: dict[str, Any]) -> list[dict[str, Any]]:
    """``python.csv``: one row per step, stage and function."""
    python = step.get("python") or {}
    return [{"global_step": step["global_step"], "mode": python.get("mode"), "stage": stage,
             "iterations": numbers["iterations"], **{k: v for k, v in f.items()}}
            for stage, numbers in python.get("stages", {}).items() for f in numbers["functions"]]


# ---- the page -------------------------------------------------------------------------------
def section(python: dict[str, Any] | None, cell: Any, name_cell: Any) -> str:
    """The step's flame view on the page: per stage an icicle of the call tree and the functions' table."""
    if not python:
        return ""
    how = ("sampled stacks (rlprof's sampler: samples x the time between them)" if python["mode"] == "sampled"
           else "exact stacks (torch's Python events)")
    out = [f"<h3>Python functions by stage</h3><p class=muted>From {escape(how)}; self time is time as the "
           "innermost frame. Change per iteration against the step before.</p>"]
    keys = ("self_per_iteration_ms", "before_self_per_iteration_ms", "change_pct", "total_per_iteration_ms",
            "self_share_pct", "self_ms", "total_ms")
    for stage, numbers in python["stages"].items():
        out.append(f"<h4>{escape(stage)}: {numbers['ms']:,.1f} ms"
                   + (f" over {numbers['iterations']} iteration(s)" if numbers["iterations"] else "") + "</h4>")
        if stage != BETWEEN:  # between iterations: the table alone (the engine's loop, waiting)
            out.append(icicle(numbers["tree"], f"Python call tree, {stage}"))
        rows = "".join(f"<tr>{name_cell(f['name'])}"
                       + "".join(cell(f[k], f"python.stages.{stage}.functions.{i}.{k}", pct=k == "change_pct")
                                 for k in keys)
                       + f"<td class='name status'>{escape(f['status'] or '')}</td></tr>"
                       for i, f in enumerate(numbers["functions"]))
        out.append(f"<table class=python data-stage='{escape(stage)}'><tr><th class=name>function</th>"
                   "<th>self ms per iteration</th><th>previous step</th><th>change per iteration</th>"
                   "<th>total ms per iteration</th><th>self share</th><th>self ms</th><th>total ms</th>"
                   f"<th class='name nw'>status</th></tr>{rows}</table>")
    return "".join(out)


def icicle(tree: dict[str, Any], title: str, width: int = 960, row: int = 18) -> str:
    """The call tree as an SVG icicle: the outermost frames on top, each as wide as its time; its name
    and time in the tooltip."""
    whole = tree["ms"] or 1.0
    skipped: list[str] = []  # the frames every sample shares (the engine's loop, a test runner): one caption
    while len(tree["children"]) == 1 and tree["children"][0]["ms"] >= 0.99 * whole and tree["children"][0]["children"]:
        tree = tree["children"][0]
        skipped.append(tree["name"].rsplit(": ", 1)[-1])
    whole = tree["ms"] or 1.0
    rects: list[str] = []
    depth_seen = 0

    def place(node: dict[str, Any], x: float, depth: int) -> None:
        nonlocal depth_seen
        if depth >= ICICLE_DEPTH:
            return
        w = width * node["ms"] / whole
        if w < 1:
            return
        depth_seen = max(depth_seen, depth + 1)
        short = node["name"].rsplit(": ", 1)[-1]
        label = escape(short if len(short) * 6.5 < w - 4 else "")
        hue = (sum(map(ord, short)) * 37) % 60 + 10
        rects.append(f"<g><title>{escape(node['name'])}: {node['ms']:,.3f} ms</title>"
                     f"<rect x='{x:.1f}' y='{depth * row}' width='{max(w - 0.5, 0.5):.1f}' height='{row - 1}' "
                     f"fill='hsl({hue},80%,62%)'/>"
                     + (f"<text x='{x + 3:.1f}' y='{depth * row + 13}' font-size='11'>{label}</text>" if label else "")
                     + "</g>")
        child_x = x
        for child in node["children"]:
            place(child, child_x, depth + 1)
            child_x += width * child["ms"] / whole

    x = 0.0
    for top in tree["children"]:
        place(top, x, 0)
        x += width * top["ms"] / whole
    height = max(depth_seen, 1) * row
    shown = skipped if len(skipped) <= 3 else [*skipped[:2], "...", skipped[-1]]
    caption = (f"<p class=muted>Below {escape(' > '.join(shown))} ({len(skipped)} frame(s) every sample "
               "shares)</p>" if skipped else "")
    return (f"{caption}<svg class=icicle role=img aria-label='{escape(title)}' width='{width}' height='{height}' "
            f"viewBox='0 0 {width} {height}'>{''.join(rects)}</svg>")
