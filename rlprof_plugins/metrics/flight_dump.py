"""A flight recorder's dump on disk: ``anomaly.json`` and a Chrome trace per rank, and read back.

Where: ``<dir>/global_step_<N>/flight/<time>-<reason>/`` (``<dir>/flight/...``
while no step is known), N the step the event belongs to, ``<time>`` the
event's end in UTC (``YYYYmmdd-HHMMSS``), by the clock of the rank that
wrote it first. The ranks of one server see one slow iteration together
(their collectives keep them in step, so they count the same iterations),
each in its own process: a rank finding a folder of the same reason whose
event is within ``JOIN_ITERATIONS`` of its own iteration writes into it, so
one event is one folder, a trace per rank, whatever the ranks' clocks say
(``JOIN_SECONDS`` decides only where no iteration is known). Two ranks that
made their folders at the same moment join the one whose name sorts first.
A requested dump names its folder for every rank.

- ``anomaly.json``: ``reason``, ``stage``, ``iteration``, ``duration_ms``
  (what was measured), ``baseline_ms`` (what it was compared with),
  ``factor``, ``global_step``, ``window`` and ``event`` (start and end, Unix
  seconds), ``server`` (name, host), ``ongoing``, ``detail`` and ``ranks``
  (each rank's own numbers and its trace's file): the first rank's fields at
  the top. Rewritten whole, atomically, under a lock, as each rank adds its
  part.
- ``<rank>.flight.json``: the window on the trace's clock (microseconds from
  ``baseTimeNanoseconds``, wall-clock): each iteration as an
  ``rlprof::iteration N [stage] ...`` range (the name rank traces use, so
  ``rlprof summary`` and the report read it; ``args``: requests waiting,
  whether a session recorded it), rlprof's pauses as in rank traces, and
  the engine thread's sampled stacks as ``python_sample`` spans (the flame
  view reads them as it reads a session's).

Every file is written to a temporary name and renamed; a folder appears
whole. The trace is written an event at a time, in the order the events
start, with nothing sorted or collected at once, so the recorder's thread
holds Python's lock for short stretches and leaves no pile of objects for
the garbage collector to walk while the engine runs. The dumps below
``<dir>`` are held to ``disk_mb``: a new dump makes room by removing the
oldest dumps the recorder wrote on its own (a requested dump is never
removed), so routine dumps never crowd out later ones; the sizes come from
``flight_ledger``, so this costs what it removes. A dump
that still finds no room, or a full disk, is dropped with one log line and
counted (``on_dropped``: ``rlprof_anomalies_dropped_total``); serving goes on.
Retention (``keep_last_steps``) removes them with their step's folder.
"""

from __future__ import annotations

import calendar
import fcntl
import json
import os
import re
import shutil
import socket
import time
from pathlib import Path
from typing import Any, Iterator

from .._log import logger
from ..backends.stack_sampler import frame_name
from ..stages import ITERATION_PREFIX, IterationInfo, iteration_annotation
from ..store import servers
from ..store.layout import FLIGHT_DIR, STEP_DIR_PREFIX, step_folders
from ..atomic_files import write_text_atomic
from ..trace.analysis.python_stacks import SAMPLE_CAT
from .flight import REQUESTED, Anomaly, Window
from .flight_ledger import DumpLedger, LedgerEntry

ANOMALY_FILE = "anomaly.json"
TRACE_SUFFIX = ".flight.json"
JOIN_ITERATIONS = 2  # a rank's event this close (in iterations) to a folder's, of the same reason, is the same event
JOIN_SECONDS = 2  # ... and where no iteration is known, this close in time
_FOLDER = re.compile(r"^(?P<time>\d{8}-\d{6})-(?P<reason>[a-z_]+)(?:-\d+)?$")
_LOCK = ".anomaly.lock"


def flight_root(root: str | os.PathLike, step: int | None) -> Path:
    base = Path(root)
    return base / (f"{STEP_DIR_PREFIX}{step}" if step is not None else "") / FLIGHT_DIR


def folder_name(end_ns: int, reason: str) -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime(end_ns / 1e9))}-{reason}"


def folder_seconds(name: str) -> tuple[float, str] | None:
    """A dump folder's time (seconds, from its name's clock) and reason; None for a folder no dump named."""
    m = _FOLDER.match(name)
    if not m:
        return None
    return calendar.timegm(time.strptime(m["time"], "%Y%m%d-%H%M%S")), m["reason"]


class DumpWriter:
    """Writes one rank's dumps below ``root`` (a ``FlightRecorder``'s ``write``); ``on_written(anomaly)``
    is told of each (the rank's ``rlprof_anomalies_total``)."""

    def __init__(self, root: str | os.PathLike, rank: str, settings: dict[str, Any], server: str | None,
                 on_written: Any = None, on_dropped: Any = None) -> None:
        self.root = Path(root)
        self.rank = rank
        self.settings = settings
        self.server = {"name": server, "host": socket.gethostname()}
        self.budget = int(settings["disk_mb"]) << 20
        self.on_written = on_written
        self.on_dropped = on_dropped  # told the reason of each dump dropped for want of room
        self.ledger = DumpLedger(self.root, lambda: ledger_entries(self.root))

    def __call__(self, anomaly: Anomaly, window: Window) -> Path | None:
        used = self.ledger.make_room(self.budget)
        if used >= self.budget:
            logger.warning("rlprof: flight recorder dump (%s) dropped: the dumps below %s hold %.0f MB, "
                           "the budget (flight_recorder.disk_mb) is %d MB, and only requested dumps are left",
                           anomaly.reason, self.root, used / 1e6, self.budget >> 20)
            if self.on_dropped is not None:
                self.on_dropped(anomaly.reason)
            return None
        base = flight_root(servers.current(self.root), anomaly.global_step)  # (moved: the claim was lost)
        base.mkdir(parents=True, exist_ok=True)
        hint = anomaly.folder_hint if anomaly.folder_hint and _FOLDER.match(anomaly.folder_hint) else None
        name = hint or self._joined(base, anomaly) or folder_name(anomaly.end_ns, anomaly.reason)
        folder = base / name
        trace_name = f"{self.rank}{TRACE_SUFFIX}"
        if folder.is_dir():  # another rank's (or a requested dump's) folder: add this rank's files
            write_text_atomic(folder / trace_name, trace_parts(window, self.rank, anomaly))
            self._add_to_anomaly(folder, anomaly, window, trace_name)
        else:  # a folder of its own, made whole under a temporary name, then renamed
            tmp = base / f".{name}.{os.getpid()}.tmp"
            try:
                tmp.mkdir()
                write_text_atomic(tmp / trace_name, trace_parts(window, self.rank, anomaly))
                self._add_to_anomaly(tmp, anomaly, window, trace_name)
                try:
                    os.rename(tmp, folder)
                except OSError:  # another rank made it meanwhile: join it
                    os.replace(tmp / trace_name, folder / trace_name)
                    self._add_to_anomaly(folder, anomaly, window, trace_name)
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
            folder = self._join_twin(base, folder, anomaly, window, trace_name)
        self.ledger.written(ledger_entry(folder))
        logger.warning("rlprof: flight recorder: %s%s on %s at global step %s: %s against %s: %s", anomaly.reason,
                       f" ({anomaly.stage})" if anomaly.stage else "", self.rank, anomaly.global_step,
                       _ms(anomaly.duration_ms), _ms(anomaly.baseline_ms), folder)
        if self.on_written is not None:
            self.on_written(anomaly)
        return folder

    def _joined(self, base: Path, anomaly: Anomaly, mine: str | None = None) -> str | None:
        """A folder another rank made for the same event (``same_event``), the first by name; ``mine``: this
        rank's own folder, left out."""
        for entry in sorted(os.listdir(base)):
            if entry != mine and not (base / entry / f"{self.rank}{TRACE_SUFFIX}").exists() \
                    and same_event(base / entry, anomaly):
                return entry
        return None

    def _join_twin(self, base: Path, folder: Path, anomaly: Anomaly, window: Window, trace: str) -> Path:
        """Another rank made a folder for the same event at the same moment (named by its own clock): the one
        whose name sorts first keeps both ranks' files, and this rank's moves there."""
        twin = self._joined(base, anomaly, mine=folder.name)
        if twin is None or twin > folder.name:
            return folder
        target = base / twin
        os.replace(folder / trace, target / trace)
        self._add_to_anomaly(target, anomaly, window, trace)
        shutil.rmtree(folder, ignore_errors=True)
        return target

    def _add_to_anomaly(self, folder: Path, anomaly: Anomaly, window: Window, trace: str) -> None:
        with open(folder / _LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            path = folder / ANOMALY_FILE
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                data = {}
            mine = anomaly_fields(anomaly, window)
            if not data.get("reason"):
                data = {**mine, "server": self.server, "ranks": {}}
            data.setdefault("ranks", {})[self.rank] = {
                k: mine[k] for k in ("duration_ms", "baseline_ms", "factor", "iteration", "stage", "event", "ongoing")}
            data["ranks"][self.rank].update(trace=trace, pid=os.getpid())
            write_text_atomic(path, json.dumps(data, indent=1))
        # the lock file stays (hidden, empty): removed while another rank waits on it, a third would lock a new one


def same_event(folder: Path, anomaly: Anomaly) -> bool:
    """Whether a dump's folder is of ``anomaly``'s event: the same reason, and its first rank's iteration
    within ``JOIN_ITERATIONS`` of the anomaly's (the ranks of one server count the same iterations), or,
    where either has no iteration, its name's time within ``JOIN_SECONDS`` of the anomaly's end."""
    found = folder_seconds(folder.name)
    if not found or found[1] != anomaly.reason:
        return False
    try:
        theirs = json.loads((folder / ANOMALY_FILE).read_text()).get("iteration")
    except (OSError, ValueError, AttributeError):
        theirs = None
    if isinstance(theirs, int) and anomaly.iteration is not None:
        return abs(theirs - anomaly.iteration) <= JOIN_ITERATIONS
    return abs(found[0] - int(anomaly.end_ns / 1e9)) <= JOIN_SECONDS


def anomaly_fields(anomaly: Anomaly, window: Window) -> dict[str, Any]:
    return {"reason": anomaly.reason, "stage": anomaly.stage, "global_step": anomaly.global_step,
            "iteration": anomaly.iteration, "duration_ms": _round(anomaly.duration_ms),
            "baseline_ms": _round(anomaly.baseline_ms), "factor": anomaly.factor, "ongoing": anomaly.ongoing,
            "detail": anomaly.detail,
            "event": {"start": round(anomaly.start_ns / 1e9, 6), "end": round(anomaly.end_ns / 1e9, 6)},
            "window": {"start": round(window.start_ns / 1e9, 6), "end": round(window.end_ns / 1e9, 6)}}


def trace_parts(window: Window, rank: str, anomaly: Anomaly) -> Iterator[str]:
    """The rank's Chrome trace of the window, in parts (the events one at a time)."""
    base = window.start_ns
    pid = os.getpid()
    tid = window.tid or pid
    head = {"schemaVersion": 1, "baseTimeNanoseconds": base, "displayTimeUnit": "ms",
            "rlprof_flight": {"rank": rank, "reason": anomaly.reason, "global_step": anomaly.global_step}}
    yield json.dumps(head)[:-1] + ', "traceEvents": [\n'
    first = True
    for event in _events(window, pid, tid, rank):
        yield ("" if first else ",\n") + json.dumps(event)
        first = False
    yield "\n]}\n"


def _us(ns: int, base: int) -> float:
    return round((ns - base) / 1000.0, 3)


def _events(window: Window, pid: int, tid: int, rank: str) -> Iterator[dict]:
    base = window.start_ns
    yield {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"{rank} (flight recorder)"}}
    yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": "engine thread"}}
    for index, start, end, prefill, decode, batch, waiting, profiled in window.iterations:
        info = None if prefill < 0 else IterationInfo(prefill, decode, batch)
        args: dict[str, Any] = {"profiled": profiled}
        if waiting >= 0:
            args["waiting"] = waiting
        yield {"ph": "X", "cat": "user_annotation", "name": iteration_annotation(index, info), "pid": pid,
               "tid": tid, "ts": _us(start, base), "dur": round((end - start) / 1000.0, 3), "args": args}
    if window.open_since_ns:
        yield {"ph": "X", "cat": "user_annotation", "name": f"{ITERATION_PREFIX} {window.open_index}", "pid": pid,
               "tid": tid, "ts": _us(window.open_since_ns, base),
               "dur": round((window.end_ns - window.open_since_ns) / 1000.0, 3), "args": {"open": True}}
    for pause in window.pauses:
        try:
            yield pause.event(base)
        except Exception:
            continue
    yield from sample_spans(window.samples, base, pid, tid)


def sample_spans(samples: list, base: int, pid: int, tid: int) -> Iterator[dict]:
    """Consecutive samples that share a frame are one span of it (a parent holds its children), as
    ``backends.stack_sampler`` writes a session's; each sample stands for the time since the one before.

    Spans open in the order they start (samples are in time order, and a sample's new frames open outermost
    first), so each gets its place when it opens and the events come out in that order, parents first,
    without sorting. The spans are kept as columns of numbers until then: no object per span."""
    code_at: list = []  # per span, in start order: its code, start, depth, iteration (-1: none)
    start_at: list[int] = []
    depth_at: list[int] = []
    iteration_at: list[int] = []
    end_at: list[int] = []  # filled as the span closes
    count_at: list[int] = []
    weight_at: list[int] = []
    opened: list[int] = []  # the open spans' places, outermost first
    open_iteration = None

    def close_from(depth: int, at: int) -> None:
        while len(opened) > depth:
            end_at[opened.pop()] = at

    previous = None
    for at, codes, iteration in samples:
        same = 0
        if opened and open_iteration == iteration:
            limit = min(len(opened), len(codes))
            while same < limit and code_at[opened[same]] is codes[same]:
                same += 1
        close_from(same, at)
        weight = at - previous if previous is not None else 0
        for place in opened:
            count_at[place] += 1
            weight_at[place] += weight
        for depth in range(same, len(codes)):
            opened.append(len(code_at))
            code_at.append(codes[depth])
            start_at.append(at)
            depth_at.append(depth)
            iteration_at.append(-1 if iteration is None else iteration)
            end_at.append(at)
            count_at.append(1)
            weight_at.append(weight)
        open_iteration = iteration
        previous = at
    if previous is not None:
        close_from(0, previous)
    names: dict[Any, str] = {}
    for place, code in enumerate(code_at):
        name = names.get(code) or names.setdefault(code, frame_name(code))
        args: dict[str, Any] = {"samples": count_at[place], "sampled_us": round(weight_at[place] / 1000.0, 1),
                                "depth": depth_at[place]}
        if iteration_at[place] >= 0:
            args["iteration"] = iteration_at[place]
        start = start_at[place]
        yield {"ph": "X", "cat": SAMPLE_CAT, "name": name, "pid": pid, "tid": tid, "ts": _us(start, base),
               "dur": round((end_at[place] - start) / 1000.0, 3), "args": args}


def _folder_size(folder: Path) -> int:
    total = 0
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return 0
    for entry in entries:
        try:
            total += entry.stat().st_size
        except OSError:
            continue
    return total


def ledger_entry(folder: Path) -> LedgerEntry:
    """A dump's folder as the ledger keeps it: its bytes now, its event's time and reason from its name."""
    found = folder_seconds(folder.name) or (0.0, "")
    return LedgerEntry(str(folder), _folder_size(folder), found[0], found[1] == REQUESTED)


def ledger_entries(root: Path) -> Iterator[LedgerEntry]:
    """Every dump below ``root`` (the ledger's rebuild)."""
    for folder in flight_folders(root):
        if folder_seconds(folder.name) is not None:
            yield ledger_entry(folder)


def flight_folders(root: Path) -> Iterator[Path]:
    """Every dump's folder below ``root`` (each step's ``flight/`` and the stepless one)."""
    bases = [root / FLIGHT_DIR] + [folder / FLIGHT_DIR for _, folder in step_folders(root)]
    for base in bases:
        if base.is_dir():
            for entry in sorted(base.iterdir()):
                if entry.is_dir() and not entry.name.startswith("."):
                    yield entry


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"
