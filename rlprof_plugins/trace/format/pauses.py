"""The pauses rlprof's own profiler causes on an engine thread, as trace events.

torch's ``stop()`` post-processes what it recorded on the thread that
recorded (the engine's): a chunk rotation (``chunk_iterations``) and the
final stop hold the engine for as long as that takes, and no profiler is
running meanwhile, so nothing of it is in the trace. Left unmarked, the gap
reads as engine idle time in Perfetto, HolisticTraceAnalysis or any
"idle gaps" report. The controller times each pause (``Pause``); the
writers put it into the rank's trace as one complete event named
``rlprof::profiler pause`` on the thread that paused, with its cause and the
iterations the stopped chunk held in ``args``, on the trace's own clock.

``rlprof summary`` and the merged trace's metadata count these events apart
from engine time (``PAUSE_NAME`` and ``PAUSE_CAT`` on an event).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from ...atomic_files import write_text_atomic
from . import codec
from .clock import BASE_TIME
from .repair import repair_lines

PAUSE_NAME = "rlprof::profiler pause"
PAUSE_CAT = "rlprof"
ROTATION = "rotation"  # a chunk ended, the next one started
STOP = "stop"  # the session's last profiler stopped
MEMORY = "memory snapshot"  # the allocator's history turned into the window's snapshot (``memory``)
IDLE = "idle"  # the engine was about to wait for work: its chunk ended there, none runs until the next iteration
RESUME = "resume"  # the first iteration after an idle end: a fresh profiler starts
# a chunk reached its memory budget (``max_recording_mb``): it ended off the engine thread, and the iterations until
# its stop is done run unrecorded
BUDGET = "memory budget"
PAUSES_KEY = "rlprof_pauses"  # in a merged trace's metadata: the pauses per rank

_EVENTS_OPEN = re.compile(rb'"traceEvents"\s*:\s*\[\s*')


@dataclass(frozen=True)
class Pause:
    """One pause on an engine thread, in wall-clock nanoseconds (``time.time_ns``,
    the clock Kineto's ``baseTimeNanoseconds`` counts in)."""

    cause: str
    start_ns: int
    end_ns: int
    pid: int
    tid: int
    first_iteration: int | None = None  # the iterations the stopped chunk held
    last_iteration: int | None = None
    # what the chunk plan expected this stop to cost for what the chunk held (``ChunkPlan.predicted``), and the
    # chunk's recorded time outside iterations: a pause longer than its plan says the host slowed since the
    # plan last learned, not that the plan ignored ``max_pause_ms``
    planned_ms: float | None = None
    idle_ms: float | None = None

    @classmethod
    def timed(cls, cause: str, start_ns: int, first: int | None, last: int | None, *,
              planned_ms: float | None = None, idle_ms: float | None = None) -> "Pause":
        """A pause of this thread that began at ``start_ns`` and ends now."""
        return cls(cause, start_ns, time.time_ns(), os.getpid(), threading.get_native_id(), first, last,
                   planned_ms, idle_ms)

    @property
    def seconds(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    def event(self, base_ns: int) -> dict[str, Any]:
        """The trace event, on a trace whose times count microseconds from ``base_ns``."""
        held = (None if self.first_iteration is None or self.last_iteration is None
                else self.last_iteration - self.first_iteration + 1)
        return {"ph": "X", "cat": PAUSE_CAT, "name": PAUSE_NAME, "pid": self.pid, "tid": self.tid,
                "ts": round((self.start_ns - base_ns) / 1000.0, 3), "dur": round((self.end_ns - self.start_ns) / 1000.0, 3),
                "args": {"cause": self.cause, "first_iteration": self.first_iteration,
                         "last_iteration": self.last_iteration, "iterations": held,
                         **({} if self.planned_ms is None else {"planned_ms": round(self.planned_ms, 3)}),
                         **({} if self.idle_ms is None else {"idle_ms": round(self.idle_ms, 3)})}}

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def pauses_from_json(items: list[dict[str, Any]] | None) -> list[Pause]:
    return [Pause(**item) for item in items or []]


def write_pauses(path: Path, pauses: list[Pause]) -> None:
    """Pauses kept beside a chunk (``pauses_of``), for ``rlprof stitch`` to put back."""
    write_text_atomic(path, json.dumps([p.to_json() for p in pauses]))


def read_pauses(path: Path) -> list[Pause]:
    return pauses_from_json(json.loads(Path(path).read_text()))


# ---- into a trace Kineto wrote ----------------------------------------------------
def _base_of(head: bytes, path: Path) -> int:
    """The trace's ``baseTimeNanoseconds``: in the header in recent torch,
    after the events in older Kineto; 0 when absent (absolute times)."""
    m = BASE_TIME.search(head)
    if m:
        return int(m.group(1))
    with open(path, "rb") as f:
        f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
        found = BASE_TIME.findall(f.read())
    return int(found[-1]) if found else 0


def with_pauses(path: Path, pauses: list[Pause], more: Callable[[int], list[dict[str, Any]]] | None = None,
                piece: int = 1 << 20) -> Iterator[bytes]:
    """The bytes of the plain Chrome trace Kineto wrote at ``path``, with
    ``pauses`` as the first events of its ``traceEvents`` array and its frame
    names' bare quotes escaped (``repair.repair_lines``): a byte copy, no JSON
    parsing, so it costs the writer no more than copying the file. ``more(base_ns)``:
    other events of rlprof's own on the trace's clock beside them (the sampled
    Python stacks: ``backends.stack_sampler``)."""
    with open(path, "rb") as f:
        head = b""
        while True:
            block = f.read(piece)
            head += block
            m = _EVENTS_OPEN.search(head)
            if m or not block:
                break
        if not m or not (pauses or more):  # not the layout expected: the file as it is
            yield from repair_lines(_pieces(head, f, piece))
            return
        base = _base_of(head[:m.start()], path)
        events = [p.event(base) for p in pauses] + (more(base) if more is not None else [])
        if not events:
            yield from repair_lines(_pieces(head, f, piece))
            return
        text = codec.encode_events(events)
        rest = head[m.end():]
        while not rest.strip() and (block := f.read(piece)):
            rest += block
        yield head[:m.end()] + text + (b"" if rest.lstrip().startswith(b"]") else b",\n")
        yield from repair_lines(_pieces(rest, f, piece))


def _pieces(first: bytes, f, piece: int) -> Iterator[bytes]:
    if first:
        yield first
    while block := f.read(piece):
        yield block


def pauses_of(chunk: Path) -> Path:
    """Where a kept chunk's session keeps its pauses, for ``rlprof stitch`` to put back."""
    return chunk.parent / (chunk.name + ".pauses.json")
