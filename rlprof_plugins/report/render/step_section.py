"""One step's section of the report page: where each rank's time went, its iterations, operators, Python
functions (``flame``), memory and files (each linked relative to the page).

Operators are listed per iteration of their stage beside their totals (``step_numbers.operator_changes``),
so a step that recorded more iterations does not read as slower.
"""

from __future__ import annotations

import json
from functools import lru_cache
from html import escape
from typing import Any, Callable, Iterable

from . import charts, flame
from .summary import step_label


PERFETTO = "https://ui.perfetto.dev: Open trace file (traces over 1 GB: trace_processor --httpd FILE, then Perfetto)"


def cell(value: Any, field: str, unit: str = "", pct: bool = False, span: str = "") -> str:
    """A table cell with the JSON value in ``data-value``. (A page of a thousand steps has tens of
    thousands: a finite number, the common case, is written without the escaping it never needs.)"""
    kind = type(value)
    if (kind is int or kind is float) and value == value and value not in _INFINITE:
        if pct:
            text, cls = f"{value:+.1f}%", (" class=up" if value > 0 else " class=down" if value < 0 else "")
        else:
            text, cls = f"{value:,.3f}".rstrip("0").rstrip(".") if kind is float else f"{value:,}", ""
        return f"<td{span}{cls} data-field=\"{_escaped(field)}\" data-value='{value!r}'>{text}{unit}</td>"
    raw = "null" if value is None else json.dumps(value)
    if value is None:
        text, cls = "", ""
    elif pct:
        text, cls = f"{value:+.1f}%", (" class=up" if value > 0 else " class=down" if value < 0 else "")
    elif isinstance(value, float):
        text, cls = f"{value:,.3f}".rstrip("0").rstrip("."), ""
    else:
        text, cls = f"{value:,}" if isinstance(value, int) else str(value), ""
    return (f"<td{span}{cls} data-field=\"{_escaped(field)}\" data-value='{escape(raw)}'>"
            f"{escape(text)}{unit if text else ''}</td>")


_INFINITE = (float("inf"), float("-inf"))
_escaped = lru_cache(maxsize=4096)(escape)  # a page's fields are a few dozen names, over and over


def step_section(row: dict[str, Any], open_: bool, href: Callable[[str], str]) -> str:
    step = row["global_step"]
    title = step_label(step, row["directory"])
    parts = [f"<details id='step-{escape(str(step) if step is not None else 'traces')}' "
             f"data-step='{json.dumps(step)}'{' open' if open_ else ''}>"
             f"<summary>{escape(title)}: {escape(row['state'])}, {len(row['ranks'])} rank(s), "
             f"{row['iterations']} iteration(s), {', '.join(sorted(row['stages'])) or 'no stage'}</summary>"]
    if row["error"]:
        parts.append(f"<div class='note bad'>{escape(row['error'])}</div>")
    parts += [f"<div class=note data-missing-ranks>{escape(line)}</div>" for line in row.get("missing_lines", [])]
    parts += [f"<div class=note data-assumed-rank>{escape(a)}</div>" for a in row.get("assumed_ranks", [])]
    parts += [f"<div class='note bad' data-unreadable>unreadable: {escape(error)}"
              + (f" (read: {escape(', '.join(row['ranks']))})" if row["ranks"] else "") + "</div>"
              for error in row["unreadable"]]
    if row["without_iterations"]:
        parts.append(f"<div class=note>no engine iteration in {escape(', '.join(row['without_iterations']))}: "
                     "its operators are counted (as between iterations), its iterations are not</div>")
    if row["rank_time"]:
        parts.append(_ranks(row))
    if row["timeline"]:
        parts.append("<h3>Iterations</h3>" + charts.timeline(row["timeline"], f"{title}: iteration timeline"))
    for kind, heading in (("device", "Top device kernels"), ("cpu", "Top CPU operators (self time)")):
        if row["operators"].get(kind):
            parts.append(f"<h3>{escape(heading)}, all ranks</h3>"
                         + operator_table(row["operators"][kind], kind, "operators", OPERATOR_COLUMNS))
    parts.append(flame.section(row.get("python"), cell, name_cell))
    if row.get("memory"):
        parts.append(_memory(row["memory"], title))
    parts.append(_files(row, href))
    return "".join(parts) + "</details>"


# the device partition's parts, as the stacked bar shows them (trace.analysis.device_time: they add up to the window)
DEVICE_PARTS = (("compute", "compute"), ("exposed communication", "exposed_communication"),
                ("exposed memcpy", "exposed_memcpy"), ("idle", "idle"), ("between iterations", "between_iterations"))


def _ranks(row: dict[str, Any]) -> str:
    times = row["rank_time"]
    out = ["<h3>Where each rank's time went</h3>",
           charts.stacked({r: {"iterations": t["iterations_ms"], "pause": t["pause_ms"], "between": t["between_ms"]}
                           for r, t in times.items()}, ["iterations", "pause", "between"], "time per rank")]
    head = ["rank", "span ms", "iterations ms", "rlprof pauses ms", "between iterations ms", "CPU ops ms",
            "CPU collectives ms", "slowest in iterations"]
    rows = [f"<tr data-rank='{escape(rank)}'><td class=name>{escape(rank)}</td>"
            + "".join(cell(t[k], f"rank_time.{rank}.{k}") for k in ("span_ms", "iterations_ms", "pause_ms",
                                                                      "between_ms", "cpu_ops_ms", "cpu_comm_ms"))
            + cell(row["slowest_rank_iterations"].get(rank), f"slowest_rank_iterations.{rank}") + "</tr>"
            for rank, t in times.items()]
    out.append(table("class=ranks", head, rows))
    devices = {r: t["device"] for r, t in times.items() if t["device"]}
    if devices:
        out += ["<h3>Device time of the iterations</h3><p class=muted>The device work the iterations launched, "
                "merged across streams, each iteration over its own window: compute, then communication no "
                "compute covers, then copies neither covers, then idle; the rank's parts are its iterations' "
                "sums, and the device time in no iteration's window is between iterations. They add up to the "
                "rank's window (HolisticTraceAnalysis's temporal breakdown, TraceLens's GPU timeline; their idle "
                "is idle and between together).</p>",
                charts.stacked({r: {part: d[f"{key}_ms"] for part, key in DEVICE_PARTS} for r, d in devices.items()},
                               [part for part, _ in DEVICE_PARTS], "device time per rank, over its iterations")]
        head = ["rank", "window ms", "compute ms", "exposed communication ms", "exposed memcpy ms", "idle ms",
                "between iterations ms", "communication ms (all)", "communication hidden %", "memcpy ms (all)"]
        rows = [f"<tr data-rank='{escape(rank)}'><td class=name>{escape(rank)}</td>"
                + "".join(cell(d.get(k), f"rank_time.{rank}.device.{k}") for k in DEVICE_FIELDS) + "</tr>"
                for rank, d in devices.items()]
        out.append(table("class=device", head, rows))
    return "".join(out)


DEVICE_FIELDS = ("window_ms", "compute_ms", "exposed_communication_ms", "exposed_memcpy_ms", "idle_ms",
                 "between_iterations_ms", "communication_ms", "communication_overlap_pct", "memcpy_ms")


def table(attributes: str, head: list[str], rows: Iterable[str]) -> str:
    """A table: its ``attributes`` (``class=ranks``), a heading per column, then ``rows`` (each ``<tr>``)."""
    return (f"<table {attributes}><tr>" + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr>"
            + "".join(rows) + "</table>")


def _memory(ranks: dict[str, dict[str, Any]], title: str) -> str:
    """Each rank's device memory over the window, and what was alive at its peak."""
    read = {rank: m for rank, m in ranks.items() if "error" not in m}
    out = ["<h3>Device memory over the window</h3>"]
    out += [f"<div class='note bad'>{escape(rank)}: {escape(m['path'])}: {escape(m['error'])}</div>"
            for rank, m in ranks.items() if "error" in m]
    if not read:
        return "".join(out)
    out.append(charts.memory({rank: m["timeline"] for rank, m in read.items()}, f"{title}: device memory"))
    keys = ("start_allocated_mb", "peak_allocated_mb", "peak_reserved_mb", "end_allocated_mb", "peak_at_ms",
            "entries")
    head = ["rank", "allocated at start MB", "peak allocated MB", "peak reserved MB", "allocated at end MB",
            "peak at ms", "history entries"]
    out.append(table("class=memory", head, (f"<tr data-rank='{escape(rank)}'><td class=name>{escape(rank)}</td>"
                                            + "".join(cell(m[k], f"memory.{rank}.{k}") for k in keys) + "</tr>"
                                            for rank, m in read.items())))
    for rank, m in read.items():
        lines = "".join(f"<tr>{cell(a['mb'], f'memory.{rank}.top_at_peak.{k}.mb')}<td class=name>"
                        f"{escape(' < '.join(a['frames']) or '(no frames recorded)')}</td></tr>"
                        for k, a in enumerate(m["top_at_peak"]))
        if lines:
            out.append(f"<table class=peak data-rank='{escape(rank)}'><tr><th>{escape(rank)}: MB alive at the "
                       f"peak</th><th class=name>allocated by (innermost first)</th></tr>{lines}</table>")
    return "".join(out)


# a step's operator tables: each column's key and heading
OPERATOR_COLUMNS = {"per_iteration_ms": "ms per iteration", "before_per_iteration_ms": "previous step",
                    "change_pct": "change per iteration", "iterations": "iterations",
                    "before_iterations": "previous iterations", "ms": "total ms"}


def operator_table(ops: list[dict[str, Any]], kind: str, table: str, columns: dict[str, str]) -> str:
    """Operators, a row each: name, stage, the ``columns`` (key: heading; their cells' fields under
    ``<table>.<kind>.``) and the status; the table's class is ``table``."""
    rows = "".join(f"<tr>{name_cell(o['name'])}<td class='name nw'>{escape(o['stage'])}</td>"
                   + "".join(cell(o[k], f"{table}.{kind}.{k}", pct=k == "change_pct") for k in columns)
                   + f"<td class='name status'>{escape(o['status'] or '')}</td></tr>" for o in ops)
    return (f"<table class={table} data-kind={kind}><tr><th class=name>operator</th><th class=name>stage</th>"
            + "".join(f"<th>{escape(h)}</th>" for h in columns.values())
            + f"<th class='name nw'>status</th></tr>{rows}</table>")


def name_cell(name: str, limit: int = 110) -> str:
    """An operator's name; a long kernel signature cut, whole in its tooltip."""
    shown = name if len(name) <= limit else name[:limit] + "\u2026"
    return f"<td class=name title='{escape(name)}'>{escape(shown)}</td>"


def _files(row: dict[str, Any], href: Callable[[str], str]) -> str:
    folder = row["directory"]
    rows = "".join(f"<tr><td class=name><a href='{href(folder + '/' + f['path'])}'>{escape(f['path'])}</a></td>"
                   f"<td class=name>{escape(f['role'])}"
                   f"{' ' + escape(f['rank']) if f['rank'] and f['rank'] != f['role'] else ''}"
                   f"{' ' + escape(f['stage']) if f['stage'] else ''}</td>{cell(f['bytes'], 'bytes')}</tr>"
                   for f in row["files"])
    viewer = (" Memory snapshots (.pickle) open in PyTorch's memory viewer, https://pytorch.org/memory_viz "
              "(drag the file onto it; the page loads its script from the network)."
              if any(f["role"] == "memory" for f in row["files"]) else "")
    return (f"<h3>Files</h3><p class=muted>In <a href='{href(folder)}'>{escape(folder)}</a>. Open a trace in "
            f"{escape(PERFETTO)}.{escape(viewer)}</p>"
            f"<table class=files><tr><th class=name>file</th><th class=name>whose</th><th>bytes</th></tr>{rows}</table>")
