"""The fleet on the report's page: steps x replicas at a glance, one replica's details on demand.

Readable at 64 replicas x 1,000 steps and small: a heat strip (one inline
SVG; a row per replica, a column per step) of each replica's decode time per
iteration (its mean iteration time where a step has no decode), coloured by
the fleet's own quantiles, one path per colour, and each step's slowest
replica marked. Below it the slowest replica and the spread of the newest
steps, then a folded section per replica: how often it was the slowest and
its numbers step by step (the newest ``NEWEST`` steps).
"""

from __future__ import annotations

import io
from array import array
from bisect import bisect_left
from html import escape
from typing import Any

from .brief import ReplicaNumbers
from .step_section import cell

# light to dark: faster to slower, against the fleet's own quantiles
SHADES = ("#edf8e9", "#c7e9c0", "#a1d99b", "#fdd0a2", "#fdae6b", "#fd8d3c", "#e6550d", "#a63603")
NEWEST = 20  # steps a replica's section lists
STRIP_W = 960  # pixels the steps share (a cell 2 to 24 px wide)
LABEL_W = 190  # pixels of replica names left of the strip


def heat_strip(steps: list[dict[str, Any]], replicas: list[str]) -> str:
    place = {name: k for k, name in enumerate(replicas)}
    # each cell's step column, replica row, time and whether it is its step's slowest replica, in arrays (a
    # fleet of 64 replicas x 1,000 steps has 64,000 cells): what the strip colours is each replica's decode
    # time per iteration, else its mean iteration time (``brief.Briefs.time``)
    xs, ys, times, slow = array("I"), array("I"), array("d"), bytearray()
    for x, row in enumerate(steps):
        if "replicas" not in row:
            continue
        slowest = row.get("slowest_replica")
        for name, v in row["replicas"].times():
            y = place.get(name)
            if v is not None and y is not None:
                xs.append(x)
                ys.append(y)
                times.append(v)
                slow.append(name == slowest)
    if not times:
        return ""
    values = sorted(times)
    bounds = [values[min(len(values) - 1, (len(values) * (k + 1)) // len(SHADES))] for k in range(len(SHADES) - 1)]
    del values
    cw = max(2, min(24, STRIP_W // max(1, len(steps))))  # pixels per step
    ch = max(3, min(14, 900 // max(1, len(replicas))))  # pixels per replica
    shaded = [io.StringIO() for _ in SHADES]
    marked = io.StringIO()
    bar = max(1, ch // 4)
    cell_end = f"h{cw}v{ch}h-{cw}z"
    for x, y, v, slowest in zip(xs, ys, times, slow):  # a cell's shade: how many of the bounds lie below its time
        left = LABEL_W + x * cw
        shaded[bisect_left(bounds, v)].write(f"M{left},{y * ch}{cell_end}")
        if slowest:
            marked.write(f"M{left},{y * ch + (ch - bar) // 2}h{cw}v{bar}h-{cw}z")
    paths, marks = [p.getvalue() for p in shaded], marked.getvalue()
    strip_end = LABEL_W + max(1, len(steps)) * cw
    width, height = max(strip_end, LABEL_W + 90), max(1, len(replicas)) * ch  # room for the step label
    body = "".join(f"<path fill='{SHADES[k]}' d='{p}'/>" for k, p in enumerate(paths) if p)
    body += f"<path fill='#111' d='{marks}' data-slowest/>" if marks else ""
    size = min(11, ch)
    labels = "".join(f"<text x={LABEL_W - 6} y={k * ch + (ch + size) // 2 - 1} text-anchor=end font-size={size}>"
                     f"{escape(name)}</text>" for k, name in enumerate(replicas)) if ch >= 7 else ""
    first = steps[0]["global_step"] if steps else ""
    last = steps[-1]["global_step"] if steps else ""
    legend = " ".join(f"<span style='background:{c};padding:0 6px'>&nbsp;</span>" for c in SHADES)
    return (f"<figure data-heat-strip style='margin:8px 0'><svg role=img "
            f"aria-label='decode time per iteration, replicas x steps' width={width} height={height + 16} "
            f"viewBox='0 0 {width} {height + 16}' style='max-width:100%;height:auto'>{labels}{body}"
            + (f"<text x={LABEL_W} y={height + 13} font-size=11>step {escape(str(first))}</text>"
               f"<text x={strip_end} y={height + 13} font-size=11 text-anchor=end>step {escape(str(last))}</text>"
               if strip_end - LABEL_W >= 140 else
               f"<text x={LABEL_W} y={height + 13} font-size=11>steps {escape(str(first))}-{escape(str(last))}</text>")
            + "</svg>"
            f"<figcaption class=muted>Decode time per iteration of each replica (a row) in each step (a column), "
            f"faster {legend} slower (the fleet's own quantiles: {escape(', '.join(f'{b:.3g}' for b in bounds))} "
            "ms); the black bar marks each step's slowest replica.</figcaption></figure>")


def fleet_section(report: dict[str, Any]) -> str:
    """The page's fleet view (empty for a single server)."""
    replicas = report.get("replicas")
    steps = report["steps"]
    if not replicas:
        return ""
    slowest_count = {name: 0 for name in replicas}
    for row in steps:
        if row.get("slowest_replica") in slowest_count:
            slowest_count[row["slowest_replica"]] += 1
    newest = steps[-NEWEST:]
    head = "<tr><th>step</th><th>replicas</th><th>slowest replica</th><th>spread (slowest / median)</th></tr>"
    lines = "".join(
        f"<tr><td>{escape(str(row['global_step']))}</td>{cell(len(row.get('replicas', [])), 'replicas')}"
        f"<td class=name data-field=slowest_replica>{escape(str(row.get('slowest_replica')))}</td>"
        f"{cell(row.get('replica_spread'), 'replica_spread')}</tr>" for row in reversed(newest))
    per_replica: dict[str, list] = {name: [] for name in replicas}
    for row in steps[-NEWEST:]:
        for n in row.get("replicas", []):
            per_replica.setdefault(n.name, []).append((row["global_step"], n))
    counts: dict[str, int] = {}
    for row in steps:
        for name in row["replicas"].names() if "replicas" in row else ():
            counts[name] = counts.get(name, 0) + 1
    sections = [_replica_section(name, per_replica.get(name, []), counts.get(name, 0), slowest_count[name])
                for name in replicas]
    return (f"<h2>Replicas</h2><p class=muted>{len(replicas)} replicas (servers). A step waits for its slowest "
            "replica: the one with the most iteration time; the spread is its iteration time over the median "
            "replica's. Each step's row under 'Across steps' and its details are its slowest replica's.</p>"
            + heat_strip(steps, replicas)
            + f"<table id=fleet>{head}{lines}</table>" + "".join(sections))


def _replica_section(name: str, mine: list[tuple[Any, ReplicaNumbers]], steps: int, slowest: int) -> str:
    """One replica's folded section: its newest steps (``mine``: step and numbers) of the ``steps`` it has."""
    head = ("<tr><th>step</th><th>state</th><th>iterations</th><th>iteration ms</th><th>mean ms</th>"
            "<th>decode mean ms</th><th>decode p90 ms</th><th>prefill mean ms</th><th>busy %</th>"
            "<th>straggler rank</th></tr>")
    rows = []
    for step, n in reversed(mine):
        decode, prefill = n.stage("decode"), n.stage("prefill")
        rows.append(f"<tr><td>{escape(str(step))}</td><td>{escape(str(n.state))}</td>"
                    f"{cell(n.iterations, 'iterations')}{cell(n.iteration_ms_total, 'iteration_ms_total')}"
                    f"{cell(n.mean_ms, 'mean_ms')}{cell(decode.get('mean_ms'), 'decode.mean_ms')}"
                    f"{cell(decode.get('p90_ms'), 'decode.p90_ms')}{cell(prefill.get('mean_ms'), 'prefill.mean_ms')}"
                    f"{cell(n.busy_pct, 'busy_pct')}<td>{escape(str(n.straggler or ''))}</td></tr>")
    return (f"<details data-replica='{escape(name)}'><summary>{escape(name)}: {steps} step(s), the slowest in "
            f"{slowest}</summary><table>{head}{''.join(rows)}</table></details>")
