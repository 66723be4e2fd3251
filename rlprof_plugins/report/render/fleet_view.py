"""The fleet on the report's page: steps x replicas at a glance, one replica's details on demand.

A heat strip (one inline SVG: a row per replica, a column per step) of each replica's decode time per
iteration (else its mean iteration time), shaded by the fleet's own quantiles, one path per shade, each
step's slowest replica marked; then the newest steps' slowest replica and spread, and a folded section
per replica with its newest ``NEWEST`` steps.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections import Counter
from html import escape
from typing import Any, Iterator

from .step_section import cell

# light to dark: faster to slower, against the fleet's own quantiles
SHADES = ("#edf8e9", "#c7e9c0", "#a1d99b", "#fdd0a2", "#fdae6b", "#fd8d3c", "#e6550d", "#a63603")
NEWEST = 20  # steps a replica's section lists
STRIP_W = 960  # pixels the steps share (a cell 2 to 24 px wide)
LABEL_W = 190  # pixels of replica names left of the strip
PART_CELLS = 4096  # cells of the heat strip written at a time


def heat_strip_parts(steps: list[dict[str, Any]], replicas: list[str]) -> Iterator[str]:
    """The heat strip in parts of at most ``PART_CELLS`` cells, which the page writes as they come: a cell per
    replica-step, never one string."""
    place = {name: k for k, name in enumerate(replicas)}
    # each cell's step column and replica row (one number: x * rows + y), time and whether it is its step's
    # slowest replica, in arrays: what the strip colours is each replica's decode time per iteration, else its
    # mean iteration time (``brief.Briefs.time``)
    rows = max(1, len(replicas))
    cells, times, slow = array("I" if len(steps) * rows < 2 ** 32 else "Q"), array("d"), bytearray()
    for x, row in enumerate(steps):
        if "replicas" not in row:
            continue
        slowest = row.get("slowest_replica")
        for name, v in row["replicas"].times():
            y = place.get(name)
            if v is not None and y is not None:
                cells.append(x * rows + y)
                times.append(v)
                slow.append(name == slowest)
    if not times:
        return
    bounds = quantile_bounds(times, len(SHADES))
    # each shade's cells, in the cells' order (a cell's shade: how many of the bounds lie below its time)
    members = [array("I") for _ in SHADES]
    for k, v in enumerate(times):
        members[bisect_left(bounds, v)].append(k)
    del times
    cw = max(2, min(24, STRIP_W // max(1, len(steps))))  # pixels per step
    ch = max(3, min(14, 900 // max(1, len(replicas))))  # pixels per replica
    bar = max(1, ch // 4)
    strip_end = LABEL_W + max(1, len(steps)) * cw
    width, height = max(strip_end, LABEL_W + 90), max(1, len(replicas)) * ch  # room for the step label
    size = min(11, ch)
    yield (f"<figure data-heat-strip style='margin:8px 0'><svg role=img "
           f"aria-label='decode time per iteration, replicas x steps' width={width} height={height + 16} "
           f"viewBox='0 0 {width} {height + 16}' style='max-width:100%;height:auto'>")
    if ch >= 7:
        yield "".join(f"<text x={LABEL_W - 6} y={k * ch + (ch + size) // 2 - 1} text-anchor=end font-size={size}>"
                      f"{escape(name)}</text>" for k, name in enumerate(replicas))
    cell_end = f"h{cw}v{ch}h-{cw}z"
    for shade, mine in zip(SHADES, members):
        if mine:
            yield f"<path fill='{shade}' d='"
            for part in range(0, len(mine), PART_CELLS):
                yield "".join(f"M{LABEL_W + (c // rows) * cw},{(c % rows) * ch}{cell_end}"
                              for c in (cells[k] for k in mine[part:part + PART_CELLS]))
            yield "'/>"
    del members
    marked = [k for k, s in enumerate(slow) if s]
    if marked:
        yield "<path fill='#111' d='"
        for part in range(0, len(marked), PART_CELLS):
            yield "".join(f"M{LABEL_W + (c // rows) * cw},{(c % rows) * ch + (ch - bar) // 2}h{cw}v{bar}h-{cw}z"
                          for c in (cells[k] for k in marked[part:part + PART_CELLS]))
        yield "' data-slowest/>"
    first = steps[0]["global_step"] if steps else ""
    last = steps[-1]["global_step"] if steps else ""
    legend = " ".join(f"<span style='background:{c};padding:0 6px'>&nbsp;</span>" for c in SHADES)
    yield ((f"<text x={LABEL_W} y={height + 13} font-size=11>step {escape(str(first))}</text>"
            f"<text x={strip_end} y={height + 13} font-size=11 text-anchor=end>step {escape(str(last))}</text>"
            if strip_end - LABEL_W >= 140 else
            f"<text x={LABEL_W} y={height + 13} font-size=11>steps {escape(str(first))}-{escape(str(last))}</text>")
           + "</svg>"
           f"<figcaption class=muted>Decode time per iteration of each replica (a row) in each step (a column), "
           f"faster {legend} slower (the fleet's own quantiles: {escape(', '.join(f'{b:.3g}' for b in bounds))} "
           "ms); the black bar marks each step's slowest replica.</figcaption></figure>")


def quantile_bounds(values: array, shades: int) -> list[float]:
    """The ``shades - 1`` bounds between shades: of the values sorted, the one at ``n * (k + 1) // shades``
    for each k."""
    ordered, n = sorted(values), len(values)
    return [ordered[min(n - 1, (n * (k + 1)) // shades)] for k in range(shades - 1)]


def fleet_parts(report: dict[str, Any]) -> Iterator[str]:
    """The page's fleet view, in parts (none for a single server)."""
    replicas = report.get("replicas")
    steps = report["steps"]
    if not replicas:
        return
    slowest_count = Counter(row.get("slowest_replica") for row in steps)
    counts = Counter(name for row in steps if "replicas" in row for name in row["replicas"].names())
    newest = steps[-NEWEST:]
    head = ("<tr><th>step</th><th>replicas</th><th>slowest replica</th><th>spread (slowest / median)</th>"
            "<th>ranked by</th></tr>")
    lines = "".join(
        f"<tr><td>{escape(str(row['global_step']))}</td>{cell(len(row.get('replicas', [])), 'replicas')}"
        f"<td class=name data-field=slowest_replica>{escape(str(row.get('slowest_replica')))}</td>"
        f"{cell(row.get('replica_spread'), 'replica_spread')}"
        f"<td class=name data-field=ranked_by>{escape(str(row.get('ranked_by')))}</td></tr>"
        for row in reversed(newest))
    per_replica: dict[str, list] = {name: [] for name in replicas}
    for row in newest:
        for n in row.get("replicas", []):
            per_replica.setdefault(n["name"], []).append((row["global_step"], n))
    sections = [_replica_section(name, per_replica.get(name, []), counts[name], slowest_count[name])
                for name in replicas]
    yield (f"<h2>Replicas</h2><p class=muted>{len(replicas)} replicas (servers). A step waits for its slowest "
           "replica: the one with the most iteration time; the spread is its iteration time over the median "
           "replica's. Each step's row under 'Across steps' and its details are its slowest replica's.</p>")
    yield from heat_strip_parts(steps, replicas)
    yield f"<table id=fleet>{head}{lines}</table>" + "".join(sections)


def _replica_section(name: str, mine: list[tuple[Any, dict[str, Any]]], steps: int, slowest: int) -> str:
    """One replica's folded section: its newest steps (``mine``: step and numbers) of the ``steps`` it has."""
    head = ("<tr><th>step</th><th>state</th><th>iterations</th><th>iteration ms</th><th>mean ms</th>"
            "<th>decode mean ms</th><th>decode p90 ms</th><th>prefill mean ms</th><th>busy %</th>"
            "<th>straggler rank</th></tr>")
    rows = []
    for step, n in reversed(mine):
        decode, prefill = n["stages"].get("decode", {}), n["stages"].get("prefill", {})
        rows.append(f"<tr><td>{escape(str(step))}</td><td>{escape(str(n['state']))}</td>"
                    + "".join(cell(n[k], k) for k in ("iterations", "iteration_ms_total", "mean_ms"))
                    + f"{cell(decode.get('mean_ms'), 'decode.mean_ms')}{cell(decode.get('p90_ms'), 'decode.p90_ms')}"
                    f"{cell(prefill.get('mean_ms'), 'prefill.mean_ms')}"
                    f"{cell(n['busy_pct'], 'busy_pct')}<td>{escape(str(n['straggler'] or ''))}</td></tr>")
    return (f"<details data-replica='{escape(name)}'><summary>{escape(name)}: {steps} step(s), the slowest in "
            f"{slowest}</summary><table>{head}{''.join(rows)}</table></details>")
