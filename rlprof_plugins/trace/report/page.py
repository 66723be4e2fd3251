"""The step report as one self-contained HTML page: no script, no network, inline SVG charts.

Every number a table shows carries the exact value of the report's JSON in
``data-value`` (and its place in ``data-field``), so what the page shows and
what ``--json`` writes are checked to be the same numbers. Steps that could
not be read, failed or are still recording are listed at the top and keep
their rows.
"""

from __future__ import annotations

import json
from html import escape
from typing import Any

from ... import __version__
from . import charts
from .ranks import PERFETTO

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px}h3{font-size:15px;margin:16px 0 6px}
table{border-collapse:collapse;margin:6px 0 12px}#steps tr.first td{border-top:2px solid #bbb}.nw{white-space:nowrap}td,th{border:1px solid #ddd;padding:3px 7px;text-align:right}
th{background:#f4f4f4}td.name,th.name{text-align:left;max-width:520px;overflow-wrap:anywhere}
.up{color:#b00020}.down{color:#1b7e3c}.note{background:#fff4e5;border-left:4px solid #e6a100;padding:6px 10px;margin:4px 0}
.bad{background:#fdecea;border-left-color:#b00020}details{border:1px solid #ddd;border-radius:4px;padding:4px 12px;
margin:10px 0}summary{cursor:pointer;font-weight:600}.state-failed,.state-error{color:#b00020}.muted{color:#777}
"""


def render(report: dict[str, Any], notes: list[str], compared: dict[str, Any] | None = None) -> str:
    steps = report["steps"]
    body = [f"<h1>rlprof step report</h1><p class=muted>{escape(report['root'])}: {len(steps)} step(s); "
            f"rlprof-plugins {escape(__version__)}</p>"]
    body += [f'<div class="note{" bad" if bad else ""}" data-note>{escape(text)}</div>' for bad, text in
             ((n.startswith(("failed", "unreadable", "nothing")), n) for n in notes)]
    if steps:
        body.append(_across(steps))
    if compared:
        body.append(_compare(compared))
    for k, row in enumerate(steps):
        body.append(_step(row, open_=k == len(steps) - 1 or len(steps) <= 3))
    return ("<!doctype html><html lang=en><head><meta charset=utf-8><title>rlprof step report: "
            f"{escape(report['root'])}</title><meta name=viewport content='width=device-width'>"
            f"<style>{STYLE}</style></head><body>" + "".join(body) + "</body></html>")


def _num(value: Any, field: str, unit: str = "", pct: bool = False, span: str = "") -> str:
    """A table cell with the JSON value in ``data-value``."""
    raw = json.dumps(value)
    if value is None:
        text, cls = "", ""
    elif pct:
        text, cls = f"{value:+.1f}%", (" class=up" if value > 0 else " class=down" if value < 0 else "")
    elif isinstance(value, float):
        text, cls = f"{value:,.3f}".rstrip("0").rstrip("."), ""
    else:
        text, cls = f"{value:,}" if isinstance(value, int) else str(value), ""
    return (f"<td{span}{cls} data-field=\"{escape(field)}\" data-value='{escape(raw)}'>"
            f"{escape(text)}{unit if text else ''}</td>")


def _across(steps: list[dict[str, Any]]) -> str:
    stages = sorted({s for row in steps for s in row["stages"]})
    labels = [row["global_step"] if row["global_step"] is not None else "-" for row in steps]
    chart = charts.trend(labels, {s: [row["stages"].get(s, {}).get("mean_ms") for row in steps] for s in stages},
                         "mean iteration time per step, by stage")
    head = ["step", "state", "engine", "ranks", "iterations", "span ms", "rlprof pauses", "pause ms", "trace MB",
            "stage", "iterations", "share", "mean ms", "p90 ms", "vs previous", "mean batch", "tokens"]
    rows = []
    for row in steps:  # a line per stage; the step's own cells span them
        span = f" rowspan={max(1, len(row['stages']))}"
        cells = [_num(row["global_step"], "global_step", span=span),
                 f"<td{span} class='name state-{escape(row['state'])}'>{escape(row['state'])}</td>",
                 f"<td{span} class='name nw'>{escape(str(row['engine'] or ''))} "
                 f"{escape(str(row['engine_version'] or ''))}</td>",
                 f"<td{span}>{len(row['ranks'])}</td>", _num(row["iterations"], "iterations", span=span),
                 _num(row["span_ms"], "span_ms", span=span), _num(row["profiler_pauses"], "profiler_pauses", span=span),
                 _num(row["profiler_pause_ms"], "profiler_pause_ms", span=span),
                 f"<td{span}>{row['trace_bytes'] / 1e6:,.2f}</td>"]
        for k, (s, n) in enumerate(sorted(row["stages"].items()) or [("", {})]):
            tokens = (n.get("prefill_tokens") or 0) + (n.get("decode_tokens") or 0) if n else None
            cells += [f"<td class='name nw'><span style='color:{charts.colour(s)}'>&#9632;</span> {escape(s)}</td>",
                      _num(n.get("iterations"), f"stages.{s}.iterations"),
                      _num(n.get("share_pct"), f"stages.{s}.share_pct", unit="%"),
                      _num(n.get("mean_ms"), f"stages.{s}.mean_ms"), _num(n.get("p90_ms"), f"stages.{s}.p90_ms"),
                      _num(row["change_pct"].get(s), f"change_pct.{s}", pct=True),
                      _num(n.get("mean_batch"), f"stages.{s}.mean_batch"), f"<td>{'' if tokens is None else tokens}</td>"]
            rows.append(f"<tr data-step='{json.dumps(row['global_step'])}'{' class=first' if k == 0 else ''}>"
                        + "".join(cells) + "</tr>")
            cells = []
    table = ("<table id=steps><tr>" + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr>" + "".join(rows)
             + "</table>")
    return ("<h2>Across steps</h2><p class=muted>An iteration's time is its slowest rank's (the engine waits for "
            "every rank). rlprof's own profiler pauses are counted apart, never as engine time.</p>" + chart + table)


def _step(row: dict[str, Any], open_: bool) -> str:
    step = row["global_step"]
    title = f"step {step}" if step is not None else "traces"
    parts = [f"<details id='step-{escape(str(step))}' data-step='{json.dumps(step)}'{' open' if open_ else ''}>"
             f"<summary>{escape(title)}: {escape(row['state'])}, {len(row['ranks'])} rank(s), "
             f"{row['iterations']} iteration(s), {', '.join(sorted(row['stages'])) or 'no stage'}</summary>"]
    if row["error"]:
        parts.append(f"<div class='note bad'>{escape(row['error'])}</div>")
    if row["missing_ranks"]:
        parts.append(f"<div class=note>missing rank(s): {escape(', '.join(row['missing_ranks']))}</div>")
    if row["rank_time"]:
        parts.append(_ranks(row))
    if row["timeline"]:
        parts.append("<h3>Iterations</h3>" + charts.timeline(row["timeline"], f"{title}: iteration timeline"))
    for kind, heading in (("device", "Top device kernels"), ("cpu", "Top CPU operators (self time)")):
        if row["operators"].get(kind):
            parts.append(_operators(row["operators"][kind], f"{heading}, all ranks", kind))
    if row.get("memory"):
        parts.append(_memory(row["memory"], title))
    parts.append(_files(row))
    return "".join(parts) + "</details>"


def _ranks(row: dict[str, Any]) -> str:
    times = row["rank_time"]
    out = ["<h3>Where each rank's time went</h3>",
           charts.stacked({r: {"iterations": t["iterations_ms"], "pause": t["pause_ms"], "between": t["between_ms"]}
                           for r, t in times.items()}, ["iterations", "pause", "between"], "time per rank")]
    devices = {r: {k[:-3]: v for k, v in t["device"].items()} for r, t in times.items() if t["device"]}
    if devices:
        out.append(charts.stacked(devices, ["compute", "communication", "memcpy", "idle"], "device time per rank"))
    head = ["rank", "span ms", "iterations ms", "rlprof pauses ms", "between iterations ms", "CPU ops ms",
            "CPU collectives ms", "slowest in iterations"] + (
        ["device compute ms", "communication ms", "memcpy ms", "idle ms"] if devices else [])
    rows = []
    for rank, t in times.items():
        cells = [f"<td class=name>{escape(rank)}</td>"] + [
            _num(t[k], f"rank_time.{rank}.{k}") for k in ("span_ms", "iterations_ms", "pause_ms", "between_ms",
                                                          "cpu_ops_ms", "cpu_comm_ms")]
        cells.append(_num(row["slowest_rank_iterations"].get(rank), f"slowest_rank_iterations.{rank}"))
        if devices:
            cells += [_num((t["device"] or {}).get(k), f"rank_time.{rank}.device.{k}")
                      for k in ("compute_ms", "communication_ms", "memcpy_ms", "idle_ms")]
        rows.append(f"<tr data-rank='{escape(rank)}'>" + "".join(cells) + "</tr>")
    out.append("<table class=ranks><tr>" + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr>"
               + "".join(rows) + "</table>")
    return "".join(out)


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
    rows = "".join(f"<tr data-rank='{escape(rank)}'><td class=name>{escape(rank)}</td>"
                   + "".join(_num(m[k], f"memory.{rank}.{k}") for k in keys) + "</tr>" for rank, m in read.items())
    out.append("<table class=memory><tr>" + "".join(f"<th>{escape(h)}</th>" for h in head) + f"</tr>{rows}</table>")
    for rank, m in read.items():
        lines = "".join(f"<tr>{_num(a['mb'], f'memory.{rank}.top_at_peak.{k}.mb')}<td class=name>"
                        f"{escape(' < '.join(a['frames']) or '(no frames recorded)')}</td></tr>"
                        for k, a in enumerate(m["top_at_peak"]))
        if lines:
            out.append(f"<table class=peak data-rank='{escape(rank)}'><tr><th>{escape(rank)}: MB alive at the "
                       f"peak</th><th class=name>allocated by (innermost first)</th></tr>{lines}</table>")
    return "".join(out)


def _operators(ops: list[dict[str, Any]], heading: str, kind: str) -> str:
    rows = "".join(f"<tr>{_name(o['name'])}{_num(o['ms'], f'operators.{kind}.ms')}"
                   f"{_num(o['change_pct'], f'operators.{kind}.change_pct', pct=True)}</tr>" for o in ops)
    return (f"<h3>{escape(heading)}</h3><table class=operators data-kind={kind}><tr><th class=name>operator</th>"
            f"<th>ms</th><th>vs previous step</th></tr>{rows}</table>")


def _name(name: str, limit: int = 110) -> str:
    """An operator's name; a long kernel signature cut, whole in its tooltip."""
    shown = name if len(name) <= limit else name[:limit] + "\u2026"
    return f"<td class=name title='{escape(name)}'>{escape(shown)}</td>"


def _files(row: dict[str, Any]) -> str:
    rows = "".join(f"<tr><td class=name>{escape(f['path'])}</td><td class=name>{escape(f['role'])}"
                   f"{' ' + escape(f['rank']) if f['rank'] and f['rank'] != f['role'] else ''}"
                   f"{' ' + escape(f['stage']) if f['stage'] else ''}</td>{_num(f['bytes'], 'bytes')}</tr>"
                   for f in row["files"])
    viewer = (" Memory snapshots (.pickle) open in PyTorch's memory viewer, https://pytorch.org/memory_viz "
              "(drag the file onto it; the page loads its script from the network)."
              if any(f["role"] == "memory" for f in row["files"]) else "")
    return (f"<h3>Files</h3><p class=muted>In {escape(row['directory'])}. Open a trace in {escape(PERFETTO)}."
            f"{escape(viewer)}</p>"
            f"<table class=files><tr><th class=name>file</th><th class=name>whose</th><th>bytes</th></tr>{rows}</table>")


def _compare(c: dict[str, Any]) -> str:
    a, b = c["steps"]
    rows = "".join("<tr><td class=name>" + escape(s["stage"]) + "</td>" + "".join(
        _num(s[k], f"compare.{s['stage']}.{k}", pct=k.endswith("pct"))
        for k in ("iterations_a", "iterations_b", "mean_ms_a", "mean_ms_b", "mean_ms_change_pct")) + "</tr>"
        for s in c["stages"])
    out = [f"<h2 id=compare>Step {b} against step {a}</h2><table><tr><th class=name>stage</th><th>iterations {a}</th>"
           f"<th>iterations {b}</th><th>mean ms {a}</th><th>mean ms {b}</th><th>change</th></tr>{rows}</table>"]
    for kind, heading in (("device", "Device kernels"), ("cpu", "CPU operators (self time)")):
        ops = c["operators"][kind]
        if ops:
            out.append(f"<h3>{heading}, by change</h3><table class=compare data-kind={kind}><tr><th class=name>"
                       f"operator</th><th>ms {a}</th><th>ms {b}</th><th>change ms</th><th>change</th></tr>" + "".join(
                           f"<tr>{_name(o['name'])}" + "".join(
                               _num(o[k], f"compare.{kind}.{k}", pct=k == "change_pct")
                               for k in ("a_ms", "b_ms", "change_ms", "change_pct")) + "</tr>" for o in ops)
                       + "</table>")
    return "".join(out)
