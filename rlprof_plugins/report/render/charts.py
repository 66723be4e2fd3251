"""The step report's charts, drawn as inline SVG by Python: no plotting library, no script.

A chart costs its own markup only (a plotting library would add its script to every page and draw at
load time); SVG opens in every browser, prints and scales, and each mark carries a ``<title>`` tooltip.
"""

from __future__ import annotations

from html import escape
from typing import Any

COLOURS = {"prefill": "#d95f02", "decode": "#1b9e77", "all": "#7570b3", "pause": "#e7298a",
           "between": "#cfcfcf", "iterations": "#1b9e77", "cpu_ops": "#66a61e", "cpu_comm": "#e6ab02",
           "compute": "#1b9e77", "communication": "#e6ab02", "memcpy": "#7570b3", "idle": "#cfcfcf",
           "exposed communication": "#e6ab02", "exposed memcpy": "#7570b3",
           "allocated": "#1f78b4", "reserved": "#a6cee3", "full batches": "#1b9e77", "tail": "#d95f02",
           # a step's RL phases (``metrics/phases.py``) after its generation
           "waiting for the trainer": "#cfcfcf", "weight_update": "#7570b3", "cache_reset": "#e6ab02",
           "resume": "#66a61e", "sleep": "#a6761d", "wake_up": "#1f78b4"}
PALETTE = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666")  # one a rank
MAX_BARS = 600  # an iteration timeline draws at most this many bars (the slowest iteration of each bucket)
FONT = 'font-family="system-ui,sans-serif" font-size="11"'


def colour(key: str | None) -> str:
    return COLOURS.get(key or "all", "#666666")


def _nice_top(value: float) -> float:
    """A round axis top at or above ``value``."""
    if value <= 0:
        return 1.0
    magnitude = 10 ** len(str(int(value))) / 10 if value >= 1 else 1.0
    for step in (1, 2, 2.5, 5, 10):
        if step * magnitude >= value:
            return step * magnitude
    return 10 * magnitude


def _frame(width: int, height: int, body: list[str], label: str, kind: str) -> str:
    return (f'<svg class="chart" data-chart="{kind}" role="img" aria-label="{escape(label)}" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg" {FONT}>'
            + "".join(body) + "</svg>")


def _y_axis(left: int, top: int, plot_h: int, width: int, y_top: float, unit: str) -> list[str]:
    out = []
    for k in range(5):
        value = y_top * k / 4
        y = top + plot_h - plot_h * k / 4
        out.append(f'<line x1="{left}" x2="{width - 10}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>'
                   f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{value:g}</text>')
    out.append(f'<text x="4" y="{top - 6}">{escape(unit)}</text>')
    return out


def robust_top(values: list[float]) -> float:
    """An axis top that a few outliers (a warm-up step far slower than the rest) do not flatten: the largest value
    within 4x the median, rounded up; values above it are drawn on the top edge and named."""
    ordered = sorted(v for v in values if v is not None)
    if not ordered:
        return 1.0
    median = ordered[len(ordered) // 2]
    inside = [v for v in ordered if v <= 4 * median] if median > 0 else ordered
    return _nice_top(max(inside or ordered) * 1.05)


def trend(steps: list[Any], values: list[float | None], title: str, series: str, unit: str = "ms per iteration",
          width: int = 760, height: int = 220, marks: bool = True) -> str:
    """One stage's line over the steps, titled, with both axes named; a gap where a step lacks the stage;
    values above ``robust_top`` sit on the top edge as triangles carrying their value."""
    left, top, bottom = 56, 40, 34
    plot_h, plot_w = height - top - bottom, width - left - 20
    y_top = robust_top([v for v in values if v is not None])
    x_of = (lambda i: left + plot_w / 2) if len(steps) < 2 else (lambda i: left + plot_w * i / (len(steps) - 1))
    body = [f'<text x="{left}" y="14" font-weight="600" font-size="13">{escape(title)}</text>']
    body += _y_axis(left, top, plot_h, width, y_top, unit)
    every = max(1, len(steps) // 10)
    for i, step in enumerate(steps):  # about ten labels, the last step's always, none crowding it
        if i == len(steps) - 1 or (i % every == 0 and len(steps) - 1 - i >= every / 2):
            body.append(f'<text x="{x_of(i):.1f}" y="{height - 18}" text-anchor="middle">{escape(str(step))}</text>')
    body.append(f'<text x="{width - 20}" y="{height - 4}" text-anchor="end">global step</text>')
    c = colour(series)
    path, pen, above = [], "M", 0
    for i, v in enumerate(values):
        if v is None:
            pen = "M"
            continue
        y = top + plot_h - plot_h * min(v, y_top) / y_top
        path.append(f"{pen}{x_of(i):.1f} {y:.1f}")
        pen = "L"
        tip = f"<title>step {escape(str(steps[i]))}, {escape(series)}: {v:g} {escape(unit)}</title>"
        if v > y_top:
            above += 1
            body.append(f'<path d="M{x_of(i) - 5:.1f} {top + 6} L{x_of(i):.1f} {top - 3} L{x_of(i) + 5:.1f} {top + 6}Z" '
                        f'fill="#b00020" data-above="1">{tip}</path>')
        elif marks:
            body.append(f'<circle cx="{x_of(i):.1f}" cy="{y:.1f}" r="3" fill="{c}" data-series="{escape(series)}">'
                        f"{tip}</circle>")
    if path:
        body.insert(1, f'<path d="{" ".join(path)}" fill="none" stroke="{c}" stroke-width="2" '
                       f'data-series="{escape(series)}"/>')
    if above:
        body.append(f'<text x="{width - 20}" y="30" text-anchor="end" fill="#b00020">&#9650; {above} step(s) above '
                    f"{y_top:g} {escape(unit)} (hover for the value)</text>")
    return _frame(width, height, body, title, "trend")


def timeline(iterations: list[list], label: str, width: int = 760, height: int = 160) -> str:
    """A bar per iteration ([index, stage, ms, batch, rank]): height its time, colour its stage."""
    left, top, bottom = 48, 22, 24
    plot_h, plot_w = height - top - bottom, width - left - 20
    size = -(-len(iterations) // MAX_BARS)  # over MAX_BARS iterations: the slowest of each bucket of ``size``
    shown = [max(iterations[k:k + size], key=lambda it: it[2]) for k in range(0, len(iterations), size)] \
        if size > 1 else iterations
    y_top = _nice_top(max((it[2] for it in shown), default=0.0))
    body = _y_axis(left, top, plot_h, width, y_top, "ms per iteration (slowest rank)")
    bar_w = plot_w / max(1, len(shown))
    for k, (index, stage, ms, batch, rank) in enumerate(shown):
        h = plot_h * ms / y_top
        x = left + bar_w * k
        body.append(f'<rect x="{x:.1f}" y="{top + plot_h - h:.1f}" width="{max(bar_w - 1, 0.6):.1f}" '
                    f'height="{h:.1f}" fill="{colour(stage)}" data-stage="{escape(stage or "all")}">'
                    f"<title>iteration {index} ({escape(stage or 'all')}): {ms:g} ms, batch {batch}, "
                    f"slowest {escape(str(rank))}</title></rect>")
    if shown:
        body.append(f'<text x="{left}" y="{height - 8}">iteration {shown[0][0]}</text>'
                    f'<text x="{width - 20}" y="{height - 8}" text-anchor="end">iteration {shown[-1][0]}'
                    + (f" ({len(iterations)} iterations, {len(shown)} bars: each the slowest of its bucket)"
                       if len(shown) < len(iterations) else "") + "</text>")
    return _frame(width, height, body, label, "timeline")


def stacked(rows: dict[str, dict[str, float]], parts: list[str], label: str, width: int = 760) -> str:
    """A horizontal bar per row (a rank), split into ``parts`` (milliseconds), on one scale; the legend wraps
    onto as many lines as its parts need."""
    left, bar_h, gap = 80, 18, 8
    legend, x, y = [], left, 4
    for part in parts:  # each label as wide as its text (about 6.5 px a character)
        step = max(120, 24 + 7 * len(part))
        if x > left and x + step > width:
            x, y = left, y + 16
        legend.append(f'<rect x="{x}" y="{y}" width="10" height="10" fill="{colour(part)}"/>'
                      f'<text x="{x + 14}" y="{y + 9}">{escape(part.replace("_", " "))}</text>')
        x += step
    top = y + 20
    height = top + len(rows) * (bar_h + gap) + 6
    total = max((sum(r.get(p, 0.0) for p in parts) for r in rows.values()), default=0.0) or 1.0
    plot_w = width - left - 20
    body = legend
    for k, (name, r) in enumerate(rows.items()):
        y, x = top + k * (bar_h + gap), float(left)
        body.append(f'<text x="{left - 6}" y="{y + 13}" text-anchor="end">{escape(name)}</text>')
        for part in parts:
            ms = r.get(part, 0.0)
            w = plot_w * ms / total
            if w > 0:
                body.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{colour(part)}" '
                            f'data-part="{part}"><title>{escape(name)}, {escape(part.replace("_", " "))}: '
                            f"{ms:g} ms</title></rect>")
            x += w
    return _frame(width, height, body, label, "stacked")


def memory(ranks: dict[str, list[list]], label: str, width: int = 760, height: int = 200) -> str:
    """Allocated (solid) and reserved (dashed) MB over the window's milliseconds, a pair of lines per rank."""
    left, top, bottom = 56, 22, 24
    plot_h, plot_w = height - top - bottom, width - left - 20
    span = max((p[0] for pts in ranks.values() for p in pts), default=0.0) or 1.0
    y_top = _nice_top(max((max(p[1], p[2]) for pts in ranks.values() for p in pts), default=0.0))
    body = _y_axis(left, top, plot_h, width, y_top, "MB")
    for k, (rank, points) in enumerate(ranks.items()):
        for column, series, dash in ((2, "reserved", ' stroke-dasharray="5 3"'), (1, "allocated", "")):
            # a step line: the bytes hold from one allocator event to the next
            path = " ".join(f"M{left + plot_w * p[0] / span:.1f} {top + plot_h - plot_h * p[column] / y_top:.1f}"
                            if i == 0 else f"H{left + plot_w * p[0] / span:.1f} V"
                            f"{top + plot_h - plot_h * p[column] / y_top:.1f}" for i, p in enumerate(points))
            if path:
                peak = max(p[column] for p in points)
                body.append(f'<path d="{path}" fill="none" stroke="{colour(series)}" stroke-width="2"{dash} '
                            f'data-rank="{escape(rank)}" data-series="{series}"><title>{escape(rank)} {series}: '
                            f"peak {peak:g} MB</title></path>")
    for k, series in enumerate(("allocated", "reserved")):
        body.append(f'<rect x="{left + 110 * k}" y="4" width="10" height="10" fill="{colour(series)}"/>'
                    f'<text x="{left + 14 + 110 * k}" y="13">{series}</text>')
    body.append(f'<text x="{left}" y="{height - 8}">0 ms</text><text x="{width - 20}" y="{height - 8}" '
                f'text-anchor="end">{span:g} ms ({", ".join(escape(r) for r in ranks)})</text>')
    return _frame(width, height, body, label, "memory")


def occupancy(curves: dict[str, list[int]], tail_from: float | None, label: str, width: int = 760,
              height: int = 180) -> str:
    """The running batch over a step's span (each curve's points evenly spaced over it), a line per rank, and a
    dashed line where the tail begins (``tail_from``: its share of the span, 0 to 1)."""
    left, top, bottom = 48, 22, 24
    plot_h, plot_w = height - top - bottom, width - left - 20
    y_top = _nice_top(max((b for points in curves.values() for b in points), default=0))
    body = _y_axis(left, top, plot_h, width, y_top, "running batch")
    for k, (rank, points) in enumerate(curves.items()):
        if not points:
            continue
        step_w = plot_w / len(points)
        # a step line: each point holds for its share of the span
        ys = [top + plot_h - plot_h * b / y_top for b in points]
        path = (f"M{left:.1f} {ys[0]:.1f}"
                + "".join(f" H{left + step_w * i:.1f} V{y:.1f}" for i, y in enumerate(ys[1:], 1))
                + f" H{left + plot_w:.1f}")
        c = PALETTE[k % len(PALETTE)]
        body.append(f'<path d="{path}" fill="none" stroke="{c}" stroke-width="2" data-series="{escape(rank)}">'
                    f"<title>{escape(rank)}: running batch {', '.join(str(b) for b in points)}</title></path>")
        body.append(f'<rect x="{left + 70 + 90 * k}" y="4" width="10" height="10" fill="{c}"/>'
                    f'<text x="{left + 84 + 90 * k}" y="13">{escape(rank)}</text>')
    if tail_from is not None:
        x = left + plot_w * min(max(tail_from, 0.0), 1.0)
        body.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + plot_h}" stroke="{colour("tail")}" '
                    f'stroke-dasharray="4 3" stroke-width="2" data-tail-from="{tail_from:.4f}"/>'
                    f'<text x="{x + 4:.1f}" y="{top + 12}" fill="{colour("tail")}">tail</text>')
    body.append(f'<text x="{left}" y="{height - 8}">the step\'s first iteration</text><text x="{width - 20}" '
                f'y="{height - 8}" text-anchor="end">its last iteration\'s end</text>')
    return _frame(width, height, body, label, "occupancy")
