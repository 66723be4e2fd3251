"""A strict checker of the Trace Event Format rules rlprof's tools rely on.

Viewers (Perfetto, chrome://tracing) accept much and silently drop or
mis-draw the rest, so "it opened" proves little. ``check`` streams a trace
and reports every violation of:

- structure: a JSON object with a ``traceEvents`` array of objects (or the
  bare array form); each event has a known ``ph``, a string ``name``, a
  ``pid`` (int or string), a ``tid`` (except process metadata), a finite
  numeric ``ts`` (except metadata); complete events (``X``) a finite
  ``dur`` >= 0; ``B``/``E`` properly nested per thread;
- metadata: ``process_name``/``thread_name`` carry ``args.name`` (a
  string); ``*_sort_index`` carry an integer ``args.sort_index``; one name
  per pid; every pid that has events is named (merged traces);
- flows: every flow id (keyed by ``cat`` and ``id``) has exactly one start
  (``s``) and at least one end (``f``), and all its events lie in one rank;
- ranks (merged traces, from ``rlprof_merge.ranks``): every pid belongs to
  exactly one rank.

Unpaired flows are warnings in a single-rank trace (a profiler stopped
between a launch and its kernel leaves one) and errors in merged output
only if they cross ranks.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .reader import TraceFormatError, TraceReader

PHASES = frozenset("BEXiIbneCMstfPOND(),RcvVpSTF")
NAME_META = ("process_name", "thread_name")
SORT_META = ("process_sort_index", "thread_sort_index")
MAX_REPORTED = 50


@dataclass
class CheckReport:
    path: Path
    events: int = 0
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    error_count: int = 0
    warning_count: int = 0
    ranks: int = 0
    flows: int = 0

    @property
    def ok(self) -> bool:
        return self.error_count == 0

    def error(self, message: str) -> None:
        self.error_count += 1
        if len(self.errors) < MAX_REPORTED:
            self.errors.append(message)

    def warn(self, message: str) -> None:
        self.warning_count += 1
        if len(self.warnings) < MAX_REPORTED:
            self.warnings.append(message)

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "ok": self.ok, "events": self.events, "ranks": self.ranks,
                "flows": self.flows, "error_count": self.error_count, "warning_count": self.warning_count,
                "errors": self.errors, "warnings": self.warnings}


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _pid_ok(x: Any) -> bool:
    return isinstance(x, (int, str)) and not isinstance(x, bool)


def check(path: str | Path) -> CheckReport:
    report = CheckReport(Path(path))
    try:
        reader = TraceReader(path)
    except TraceFormatError as e:
        report.error(str(e))
        return report
    named: dict[Any, str] = {}
    used_pids: set = set()
    open_b: dict[tuple, int] = defaultdict(int)
    flow_starts: dict[tuple, int] = defaultdict(int)
    flow_ends: dict[tuple, int] = defaultdict(int)
    flow_pids: dict[tuple, set] = defaultdict(set)
    with reader:
        try:
            for k, e in enumerate(reader.events()):
                report.events += 1
                _check_event(k, e, report, named, used_pids, open_b, flow_starts, flow_ends, flow_pids)
        except TraceFormatError as e:
            report.error(str(e))
            return report
        merge_info = reader.trailer.get("rlprof_merge") or reader.header.get("rlprof_merge")
    for (pid, tid), depth in open_b.items():
        if depth > 0:
            report.error(f"pid {pid} tid {tid}: {depth} B event(s) never ended")
    rank_of: dict[Any, str] = {}
    if merge_info:
        ranks = merge_info.get("ranks") or []
        report.ranks = len(ranks)
        for r in ranks:
            for pid in r.get("pids", []):
                if pid in rank_of:
                    report.error(f"pid {pid} is listed for two ranks ({rank_of[pid]}, {r.get('label')})")
                rank_of[pid] = r.get("label")
        for pid in sorted(used_pids, key=str):
            if pid not in named:
                report.error(f"pid {pid!r} has events but no process_name metadata")
            if pid not in rank_of:
                report.error(f"pid {pid!r} belongs to no rank")
    else:
        report.ranks = 1
    keys = set(flow_starts) | set(flow_ends)
    report.flows = len(keys)
    for key in sorted(keys, key=str):
        cat, fid = key
        owners = {rank_of.get(p, "") for p in flow_pids[key]}
        if len(owners) > 1:
            report.error(f"flow {fid!r} ({cat}) joins ranks {sorted(owners)}")
        starts, ends = flow_starts.get(key, 0), flow_ends.get(key, 0)
        if starts > 1:
            report.error(f"flow {fid!r} ({cat}) has {starts} starts")
        elif starts != 1 or ends < 1:
            report.warn(f"flow {fid!r} ({cat}) is unpaired ({starts} start, {ends} end)")
    return report


def _check_event(k, e, report, named, used_pids, open_b, flow_starts, flow_ends, flow_pids) -> None:
    where = f"event {k}"
    ph = e.get("ph")
    if not isinstance(ph, str) or ph not in PHASES:
        report.error(f"{where}: unknown ph {ph!r}")
        return
    name = e.get("name")
    if not isinstance(name, str):
        report.error(f"{where} (ph {ph}): name missing or not a string")
    pid = e.get("pid")
    if not _pid_ok(pid):
        report.error(f"{where} ({name}): pid missing or not an int/string")
        return
    if ph == "M":
        args = e.get("args")
        if name in NAME_META:
            if not isinstance(args, dict) or not isinstance(args.get("name"), str):
                report.error(f"{where}: {name} without a string args.name")
            elif name == "process_name":
                if pid in named and named[pid] != args["name"]:
                    report.error(f"pid {pid!r} named twice ({named[pid]!r}, {args['name']!r})")
                named[pid] = args["name"]
        elif name in SORT_META:
            value = args.get("sort_index") if isinstance(args, dict) else None
            if not isinstance(value, int) or isinstance(value, bool):
                report.error(f"{where}: {name} without an integer args.sort_index")
        return
    used_pids.add(pid)
    tid = e.get("tid")
    if not _pid_ok(tid):
        report.error(f"{where} ({name}): tid missing or not an int/string")
    if not _finite(e.get("ts")):
        report.error(f"{where} ({name}): ts missing or not a finite number")
    if ph == "X":
        dur = e.get("dur")
        if not _finite(dur) or dur < 0:
            report.error(f"{where} ({name}): X event without a finite dur >= 0")
    elif ph == "B":
        open_b[(pid, tid)] += 1
    elif ph == "E":
        if open_b[(pid, tid)] <= 0:
            report.error(f"{where}: E event with no open B on pid {pid} tid {tid}")
        else:
            open_b[(pid, tid)] -= 1
    elif ph in ("s", "t", "f"):
        if "id" not in e:
            report.error(f"{where} ({name}): flow event without an id")
            return
        key = (e.get("cat"), e["id"])
        flow_pids[key].add(pid)
        if ph == "s":
            flow_starts[key] += 1
        elif ph == "f":
            flow_ends[key] += 1
