"""Open a page in the real headless Chromium (Debian's ``chromium``, driven by Playwright), network off.

Every request other than the page's own file is refused and recorded, so a
page that reaches for a CDN fails the test instead of loading slowly. What
comes back is what a reader would see: console errors, the report's table
cells (``data-field`` / ``data-value``), the charts' marks, and a screenshot.
"""

from __future__ import annotations

import io
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "Chromium is missing: `make env` installs Debian's chromium package"
    return path


@dataclass
class Opened:
    console_errors: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    cells: list[dict] = field(default_factory=list)  # {"step", "rank", "field", "value", "text"} per numeric cell
    details: list[str] = field(default_factory=list)  # the per-step sections' ids
    notes: list[str] = field(default_factory=list)
    marks: dict[str, int] = field(default_factory=dict)  # chart kind -> rect/circle count
    series: list[str] = field(default_factory=list)  # the trend chart's series
    png: bytes = b""
    load_ms: float = 0.0

    def distinct_colours(self) -> int:
        from PIL import Image

        return len(Image.open(io.BytesIO(self.png)).convert("RGB").getcolors(1 << 24) or [])


CELLS_JS = """() => [...document.querySelectorAll('td[data-value]')].map(td => ({
  step: td.closest('[data-step]') ? JSON.parse(td.closest('[data-step]').dataset.step) : null,
  rank: td.closest('tr[data-rank]') ? td.closest('tr[data-rank]').dataset.rank : null,
  field: td.dataset.field, value: JSON.parse(td.dataset.value), text: td.textContent}))"""
MARKS_JS = """() => Object.fromEntries([...document.querySelectorAll('svg[data-chart]')].reduce((m, svg) =>
  m.set(svg.dataset.chart, (m.get(svg.dataset.chart) || 0) + svg.querySelectorAll('rect[data-stage],rect[data-part],circle,path[data-series]').length),
  new Map()))"""


def open_page(page: Path, screenshot: Path | None = None, width: int = 1280, height: int | None = None) -> Opened:
    """``height``: the screenshot is the top ``height`` pixels (default: the whole page, sections open)."""
    from playwright.sync_api import sync_playwright

    out = Opened()
    url = page.resolve().as_uri()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        try:
            context = browser.new_context(viewport={"width": width, "height": height or 900}, offline=True)
            context.route("**/*", lambda route: route.continue_() if route.request.url == url
                          else (out.blocked.append(route.request.url), route.abort())[1])
            tab = context.new_page()
            tab.on("console", lambda m: out.console_errors.append(m.text) if m.type == "error" else None)
            tab.on("pageerror", lambda e: out.console_errors.append(str(e)))
            tab.goto(url, wait_until="load")
            out.load_ms = tab.evaluate("() => performance.getEntriesByType('navigation')[0].duration")
            out.cells = tab.evaluate(CELLS_JS)
            out.details = tab.evaluate("() => [...document.querySelectorAll('details[id]')].map(d => d.id)")
            out.notes = tab.evaluate("() => [...document.querySelectorAll('[data-note]')].map(n => n.textContent)")
            out.marks = tab.evaluate(MARKS_JS)
            out.series = tab.evaluate("() => [...new Set([...document.querySelectorAll("
                                      "'svg[data-chart=trend] circle')].map(c => c.dataset.series))]")
            if height is None:
                tab.evaluate("() => document.querySelectorAll('details').forEach(d => d.open = true)")
            out.png = tab.screenshot(full_page=height is None)
            if screenshot:
                screenshot.write_bytes(out.png)
        finally:
            browser.close()
    return out


def cells_match_json(opened: Opened, report: dict) -> int:
    """Every numeric cell of the steps and ranks tables shows the JSON's value; the count checked."""
    steps = {json.dumps(s["global_step"]): s for s in report["steps"]}
    checked = 0
    for cell in opened.cells:
        step = steps.get(json.dumps(cell["step"]))
        if step is None or cell["field"].startswith(("operators.", "compare.", "bytes")):
            continue
        value = step
        for part in _path(cell["field"], cell["rank"]):
            value = (value.get(part) if isinstance(value, dict)
                     else value[int(part)] if isinstance(value, list) and part.isdigit() else None)
        assert value == cell["value"], (cell, value)
        checked += 1
    return checked


def _path(field_name: str, rank: str | None) -> list[str]:
    if rank and field_name.startswith(("rank_time.", "slowest_rank_iterations.", "memory.")):
        head, rest = field_name.split(".", 1)
        rest = rest[len(rank) + 1:] if rest.startswith(rank + ".") else ""
        return [head, rank, *(rest.split(".") if rest else [])]
    return field_name.split(".")
