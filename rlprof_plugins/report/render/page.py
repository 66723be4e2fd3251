"""The step report as one self-contained HTML page: no script, no network, inline SVG charts.

Every number a table shows carries the JSON's exact value in ``data-value`` (its place in
``data-field``), so the page and ``--json`` are checked to agree. At a thousand steps the page stays
small: a chart per stage, a one-line row per step (the older ones folded), details for the newest only.
"""

from __future__ import annotations

import json
import os
from html import escape
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import quote

from ... import __version__
from ...trace.analysis.iteration_names import SOURCE_TITLES
from . import charts
from .fleet_view import fleet_parts
from . import anomalies, rollout_view
from .step_section import cell, name_cell, operator_table, step_section

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px}h3{font-size:15px;margin:16px 0 6px}
table{border-collapse:collapse;margin:6px 0 12px}.nw{white-space:nowrap}td,th{border:1px solid #ddd;padding:3px 7px;text-align:right}
th{background:#f4f4f4}td.name,th.name{text-align:left;max-width:520px;overflow-wrap:anywhere}
.up{color:#b00020}.down{color:#1b7e3c}.note{background:#fff4e5;border-left:4px solid #e6a100;padding:6px 10px;margin:4px 0}
.bad{background:#fdecea;border-left-color:#b00020}details{border:1px solid #ddd;border-radius:4px;padding:4px 12px;
margin:10px 0}summary{cursor:pointer;font-weight:600}.state-failed,.state-error{color:#b00020}.muted{color:#777}
.charts{display:flex;flex-wrap:wrap;gap:8px}.status{font-weight:600;white-space:nowrap}
#steps,#older-steps{font-size:13px}#steps td,#steps th,#older-steps td,#older-steps th{padding:2px 5px}
"""
NEWEST_ROWS = 60  # across-steps rows shown unfolded; older ones fold away


def render_parts(report: dict[str, Any], notes: list[str], compared: dict[str, Any] | None = None,
                 page: Path | None = None) -> Iterator[str]:
    """The page in parts, in order, made as they are written (``build.write_page``): a fleet's heat strip
    and steps' rows are never held whole. ``page`` (where it will be written) makes the links to each
    step's files relative."""
    steps = report["steps"]
    base = page.parent if page else Path(report["root"])
    sources = sorted({s for row in steps for s in row.get("sources", [])})
    yield ("<!doctype html><html lang=en><head><meta charset=utf-8><title>rlprof step report: "
           f"{escape(report['root'])}</title><meta name=viewport content='width=device-width'>"
           f"<style>{STYLE}</style></head><body>")
    yield (f"<h1>rlprof step report</h1><p class=muted>{escape(report['root'])}: {len(steps)} step(s); "
           f"rlprof-plugins {escape(__version__)}"
           + (f"; iterations read from {escape(', '.join(SOURCE_TITLES[s] for s in sources))}" if sources else "")
           + "</p>")
    yield from (f'<div class="note{" bad" if bad else ""}" data-note>{escape(text)}</div>' for bad, text in
                ((n.startswith(("failed", "unreadable", "nothing")), n) for n in notes))
    if steps:  # a fleet's replicas first: which replica each step waited for, before the steps' rows
        yield from fleet_parts(report)
        yield from _across(steps, base)
        yield rollout_view.section(steps)
    if compared:
        yield _compare(compared)
    yield anomalies.page_part(steps, cell, name_cell)
    detailed = [row for row in steps if "timeline" in row]
    older = [row["global_step"] for row in steps if "timeline" not in row and row.get("traced", True)]
    if older:
        yield (f"<p class=muted>Details of {len(older)} older step(s) are left out of this page to keep it small: "
               f"<code>rlprof report {escape(report['root'])} --steps A-B</code> shows any of them in full.</p>")
    for k, row in enumerate(detailed):
        yield step_section(row, open_=k == len(detailed) - 1 or len(detailed) <= 3, href=_href(base))
    yield "</body></html>"


def _href(base: Path):
    def href(path: str | Path) -> str:
        try:
            relative = os.path.relpath(path, base)
        except ValueError:  # another drive
            relative = str(path)
        return quote(Path(relative).as_posix())
    return href


def _across(steps: list[dict[str, Any]], base: Path) -> Iterator[str]:
    """'Across steps': a chart per stage, then a row per step (the older ones folded), made a row at a time."""
    stages = sorted({s for row in steps for s in row["stages"]})
    labels = [row["global_step"] if row["global_step"] is not None else Path(row["directory"]).name for row in steps]
    panels = [charts.trend(labels, [row["stages"].get(s, {}).get("mean_ms") for row in steps],
                           f"{s}: mean iteration time per step (slowest rank)", s, width=600,
                           marks=len(steps) <= 200)
              for s in stages]
    engines = {f"{row['engine'] or ''} {row['engine_version'] or ''}".strip() for row in steps} - {""}
    measured = any(row.get("measured") or not row.get("traced", True) for row in steps)
    head = ["step", "state"] + (["trace"] if measured else []) + (["engine"] if len(engines) > 1 else []) + [
        "ranks", "iterations", "mean ms", "vs previous", "straggler", "imbalance", "tail ms", "tail share"]
    tail = ["rlprof pauses", "pause ms", "trace MB", "files"]
    per_stage = ["iters", "share", "mean ms", "p90 ms", "vs previous"]
    header = ("<tr>" + "".join(f"<th rowspan=2>{escape(h)}</th>" for h in head)
              + "".join(f"<th colspan={len(per_stage)} class=nw><span style='color:{charts.colour(s)}'>&#9632;</span> "
                        f"{escape(s)}</th>" for s in stages)
              + "".join(f"<th rowspan=2>{escape(h)}</th>" for h in tail) + "</tr><tr>"
              + "".join(f"<th>{escape(h)}</th>" for _ in stages for h in per_stage) + "</tr>")
    href, several = _href(base), len(engines) > 1
    one = f" All steps: {escape(engines.pop())}." if len(engines) == 1 else ""
    yield (f"<h2>Across steps</h2><p class=muted>{one} An iteration's time is its slowest rank's (the engine waits for "
           "every rank); changes are per iteration (of the step, of each stage) against the previous step that "
           "had it, so a longer window does not read as slower. The straggler is the rank slowest in most "
           "iterations; imbalance is the slowest rank's iteration time over the fastest's. The tail is the time "
           "after the running batch fell below half of its peak for good (a few long responses keeping the engine "
           "nearly empty), on the rank where it was longest, and its share of the step. rlprof's own "
           "profiler pauses are counted apart, never as engine time.</p>"
           f"<div class=charts>{''.join(panels)}</div>")
    del panels
    older = max(0, len(steps) - NEWEST_ROWS)
    if older:
        yield (f"<details data-older><summary>The {older} older steps</summary>"
               f"<table id=older-steps>{header}")
        yield from (_row(row, stages, href, several, measured) for row in steps[:older])
        yield "</table></details>"
    yield f"<table id=steps>{header}"
    yield from (_row(row, stages, href, several, measured) for row in steps[older:])
    yield "</table>"


def _row(row: dict[str, Any], stages: list[str], href, engine: bool, measured: bool) -> str:
    step = row["global_step"]
    # a folder of traces that names no step: the folder's name
    label = escape(str(step) if step is not None else Path(row["directory"]).name)
    anchor = f"<a href='#step-{escape(str(step) if step is not None else 'traces')}'>{label}</a>" \
        if "timeline" in row else label
    who = row["straggler"] or {}
    cells = [f"<td data-field=global_step data-value='{json.dumps(step)}'>{anchor}</td>",
             f"<td class='name nw state-{escape(row['state'] if not row['unreadable'] else 'error')}'>"
             f"{escape(row['state'])}" + (f"; {len(row['unreadable'])} file(s) unreadable: "
                                          f"{escape(', '.join(e.split(':')[0] for e in row['unreadable']))}"
                                          if row["unreadable"] else "") + anomalies.marker(row) + "</td>",
             *([f"<td class='name nw' data-trace='{json.dumps(row.get('traced', True))}'>"
                f"{'traced' if row.get('traced', True) else 'metrics only'}</td>"] if measured else []),
             *([f"<td class='name nw'>{escape(str(row['engine'] or ''))} {escape(str(row['engine_version'] or ''))}"
                "</td>"] if engine else []),
             f"<td>{len(row['ranks'])}</td>", cell(row["iterations"], "iterations"), cell(row["mean_ms"], "mean_ms"),
             cell(row["step_change_pct"], "step_change_pct", pct=True),
             f"<td class='name nw' data-field=straggler data-value='{escape(json.dumps(row['straggler']))}'>"
             # the straggler's share of its iterations (traced), or by busy time (measured: no iteration is
             # matched across ranks)
             + (f"{escape(who['rank'])} ({who['share_pct']:g}%)" if who and who.get("share_pct") is not None
                else f"{escape(who['rank'])} (by busy time)" if who else "") + "</td>",
             cell(row["imbalance"], "imbalance", unit="x"),
             cell((row.get("tail") or {}).get("tail_ms"), "tail.tail_ms"),
             cell((row.get("tail") or {}).get("share_pct"), "tail.share_pct", unit="%")]
    for s in stages:
        n = row["stages"].get(s, {})
        cells += [cell(n.get("iterations"), f"stages.{s}.iterations"),
                  cell(n.get("share_pct"), f"stages.{s}.share_pct", unit="%"),
                  cell(n.get("mean_ms"), f"stages.{s}.mean_ms"), cell(n.get("p90_ms"), f"stages.{s}.p90_ms"),
                  cell(row["change_pct"].get(s), f"change_pct.{s}", pct=True)]
    cells += [cell(row["profiler_pauses"], "profiler_pauses"), cell(row["profiler_pause_ms"], "profiler_pause_ms"),
              f"<td>{row['trace_bytes'] / 1e6:,.2f}</td>",
              f"<td class='name nw'><a href='{href(row['directory'])}'>folder</a></td>"]
    return f"<tr data-step='{json.dumps(step)}'>" + "".join(cells) + "</tr>"


def _compare(c: dict[str, Any]) -> str:
    a, b = c["steps"]
    rows = "".join("<tr><td class=name>" + escape(s["stage"]) + "</td>" + "".join(
        cell(s[k], f"compare.{s['stage']}.{k}", pct=k.endswith("pct"))
        for k in ("iterations_a", "iterations_b", "mean_ms_a", "mean_ms_b", "mean_ms_change_pct")) + "</tr>"
        for s in c["stages"])
    out = [f"<h2 id=compare>Step {b} against step {a}</h2><table><tr><th class=name>stage</th><th>iterations {a}</th>"
           f"<th>iterations {b}</th><th>mean ms {a}</th><th>mean ms {b}</th><th>change</th></tr>{rows}</table>"]
    for kind, heading in (("device", "Device kernels"), ("cpu", "CPU operators (self time)")):
        ops = c["operators"][kind]
        if ops:
            out.append(f"<h3>{heading}, by change per iteration of their stage</h3>" + operator_table(
                ops, kind, "compare", {"a_per_iteration_ms": f"ms/iteration {a}", "b_per_iteration_ms":
                                       f"ms/iteration {b}", "change_pct": "change", "a_iterations": f"iterations {a}",
                                       "b_iterations": f"iterations {b}", "a_ms": f"total ms {a}",
                                       "b_ms": f"total ms {b}"}))
    return "".join(out)
