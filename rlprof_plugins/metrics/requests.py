"""The requests that held a rollout step: the few that ran longest, kept by the process that sees requests.

A rollout step ends when its last response does, so the requests that ran
longest are the ones that held it. The engine's frontend (vLLM's output
processor, SGLang's tokenizer manager) tells ``LongestRequests`` when each
request arrives, gets its first token and finishes. It keeps the ``keep``
longest of the current busy period, which runs from the first request after
the frontend had none in flight to the moment it has none again, and writes
them as one line of ``ROOT/steps/requests/<frontend>.jsonl`` when the period
ends (or every ``period_seconds``, ``RLPROF_REQUESTS_PERIOD_S``, under traffic that never stops), and beside
it a state file (``<frontend>.state.json``: the requests finished so far and
the newest period's longest) that ``/metrics`` reads (``series``). A
trainer syncs weights while the engine has nothing in flight, so a rollout
step is one or more whole busy periods; the report gives each period to the
step whose span holds its end (``step_logs.requests``, which reads them back).

Every call comes from the frontend's one event loop thread and costs a dict
or heap operation; lines are written by a thread of their own.
"""

from __future__ import annotations

import atexit
import heapq
import json
import logging
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, NamedTuple

from ..store.layout import STEPS_DIR
from ..atomic_files import write_text_atomic
from .log import STATE_SUFFIX, SUFFIX, LineFile

log = logging.getLogger("rlprof")
REQUESTS_DIR = "requests"  # below ``steps/``: not a rank's log
KEEP = 5
PERIOD_SECONDS = 300.0
PERIOD_ENV = "RLPROF_REQUESTS_PERIOD_S"  # under traffic that never stops, how often a busy period is written


def period_seconds_default() -> float:
    """``RLPROF_REQUESTS_PERIOD_S`` where it is a positive number, else ``PERIOD_SECONDS``."""
    try:
        seconds = float(os.environ.get(PERIOD_ENV, ""))
    except ValueError:
        return PERIOD_SECONDS
    return seconds if seconds > 0 else PERIOD_SECONDS


class FinishedRequest(NamedTuple):
    """One finished request's times (wall clock, seconds, to the microsecond) and sizes. ``first_token_s``:
    from its arrival to its first output token; ``queued_s``: its wait for the scheduler, where the engine
    reports it."""

    request_id: str
    arrived_at: float
    finished_at: float
    prompt_tokens: int
    output_tokens: int
    first_token_s: float | None = None
    queued_s: float | None = None

    @property
    def seconds(self) -> float:
        """End to end: arrival to the last token (to the microsecond, the times' own precision)."""
        return round(self.finished_at - self.arrived_at, 6)

    def to_json(self) -> dict[str, Any]:
        return {"request_id": self.request_id, "arrived_at": self.arrived_at, "finished_at": self.finished_at,
                "seconds": self.seconds, "prompt_tokens": self.prompt_tokens, "output_tokens": self.output_tokens,
                "first_token_s": self.first_token_s, "queued_s": self.queued_s}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "FinishedRequest":
        return cls(str(data["request_id"]), float(data["arrived_at"]), float(data["finished_at"]),
                   int(data["prompt_tokens"]), int(data["output_tokens"]), data.get("first_token_s"),
                   data.get("queued_s"))


@dataclass
class BusyPeriod:
    """From the first request's arrival to the last one's end while the frontend had requests in flight: how
    many finished, and the longest of them, longest first."""

    started_at: float
    ended_at: float
    requests: int
    longest: list[FinishedRequest] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"started_at": round(self.started_at, 6), "ended_at": round(self.ended_at, 6),
                "requests": self.requests, "longest": [r.to_json() for r in self.longest]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "BusyPeriod":
        return cls(float(data["started_at"]), float(data["ended_at"]), int(data["requests"]),
                   [FinishedRequest.from_json(r) for r in data.get("longest", [])])


class LongestRequests:
    """One frontend's busy periods, each with its ``keep`` longest requests, written as they end.

    ``in_flight``: the frontend's own requests in flight (their ids), asked when traffic that never stops cuts
    a period, so that what aborted requests left is forgotten then too; without it every noted arrival is kept
    until the frontend idles. A request in flight across a cut keeps its arrival and counts in the period it
    ends in."""

    def __init__(self, root: str | Path, name: str, *, keep: int = KEEP, period_seconds: float | None = None,
                 in_flight: Callable[[], Collection[str]] | None = None) -> None:
        self.path = Path(root) / STEPS_DIR / REQUESTS_DIR / f"{name}{SUFFIX}"
        self.keep, self.in_flight = keep, in_flight
        self.period_seconds = period_seconds_default() if period_seconds is None else period_seconds
        self.arrivals: dict[str, float] = {}  # requests in flight: their arrival
        self.awaiting_first: set[str] = set()  # requests in flight with no output token yet
        self._first: dict[str, float] = {}  # request -> when its first output token came
        self._heap: list[tuple[float, int, FinishedRequest]] = []
        self._count = 0
        self._started_at = self._ended_at = 0.0
        self.error: str | None = None
        self._lines = LineFile(self.path)
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._write, name=f"rlprof-requests-{name}", daemon=True)
        self._thread.start()
        atexit.register(self.close)  # the open period is written when the server ends

    # ---- the frontend's event loop ----------------------------------------------------------
    def arrived(self, request_id: str, at: float) -> None:
        self.arrivals[request_id] = at
        self.awaiting_first.add(request_id)

    def first_tokens(self, request_ids: Iterable[str], at: float) -> None:
        """Requests among ``request_ids`` that had no output token before have one ``at`` this time."""
        awaiting = self.awaiting_first
        for request_id in request_ids:
            if request_id in awaiting:
                awaiting.discard(request_id)
                self._first[request_id] = at

    def finished(self, request_id: str, prompt_tokens: int, output_tokens: int, *, at: float | None = None,
                 arrived_at: float | None = None, first_token_at: float | None = None,
                 queued_s: float | None = None, shown_as: str | None = None) -> None:
        """A request ended with a response (an aborted one is forgotten when the frontend idles). Times the
        caller knows itself (``arrived_at``, ``first_token_at``) win over those noted here; ``shown_as``: the
        id the client gave, where the frontend keys the request by one of its own."""
        at = time.time() if at is None else at
        noted = self.arrivals.pop(request_id, None)
        arrived = noted if arrived_at is None else arrived_at
        self.awaiting_first.discard(request_id)
        first = self._first.pop(request_id, None) if first_token_at is None else first_token_at
        if arrived is None:
            return  # arrived before rlprof followed this frontend
        if self._count and at - self._started_at > self.period_seconds:
            self._cut()  # traffic that never stops: a period at least this often
        request = FinishedRequest(shown_as or request_id, round(arrived, 6), round(at, 6), prompt_tokens,
                                  output_tokens, None if first is None else round(max(first - arrived, 0.0), 6),
                                  None if queued_s is None else round(queued_s, 6))
        if self._count == 0:
            self._started_at, self._ended_at = request.arrived_at, request.finished_at
        self._started_at = min(self._started_at, request.arrived_at)
        self._ended_at = max(self._ended_at, request.finished_at)
        self._count += 1
        entry = (request.seconds, self._count, request)
        if len(self._heap) < self.keep:
            heapq.heappush(self._heap, entry)
        elif entry[0] > self._heap[0][0]:
            heapq.heapreplace(self._heap, entry)

    def idle(self) -> None:
        """Nothing is in flight: the busy period ends (and what aborted requests left is forgotten)."""
        self.arrivals.clear()
        self.awaiting_first.clear()
        self._first.clear()
        self._end_period()

    def _cut(self) -> None:
        """The busy period has run ``period_seconds``: it is written, and the requests still in flight go on
        into the next one with their arrivals."""
        self._end_period()
        if self.in_flight is not None:
            running = self.in_flight()
            for noted in (self.arrivals, self._first):
                for request_id in [r for r in noted if r not in running]:
                    del noted[request_id]
            self.awaiting_first.intersection_update(running)

    def _end_period(self) -> None:
        if self._count:
            longest = [r for _, _, r in sorted(self._heap, reverse=True)]
            self._queue.put(BusyPeriod(self._started_at, self._ended_at, self._count, longest))
            self._heap, self._count = [], 0

    # ---- the writing thread -------------------------------------------------------------------
    def close(self, timeout: float = 5.0) -> None:
        """Write the open period and what is queued, then stop (at the server's end, and in tests)."""
        self.idle()
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(timeout)

    def _write(self) -> None:
        finished = 0
        while True:
            period = self._queue.get()
            if period is None:
                return
            finished += period.requests
            try:
                self._lines.append(json.dumps(period.to_json(), separators=(",", ":")) + "\n")
                longest = period.longest[0].seconds if period.longest else None
                write_text_atomic(self.path.with_name(self.path.name[:-len(SUFFIX)] + STATE_SUFFIX),
                             json.dumps({"requests": finished, "longest_s": longest, "ended_at": period.ended_at}))
            except Exception as e:  # a full disk: said once, serving goes on
                if self.error is None:
                    log.warning("rlprof: the longest requests not written to %s: %s", self.path, e)
                self.error = f"{type(e).__name__}: {e}"


def frontend_states(root: str | Path) -> dict[str, dict[str, Any]]:
    """Each frontend's state file below ``ROOT/steps/requests/``, by frontend name (one being replaced is left
    for the next read)."""
    out = {}
    for path in sorted((Path(root) / STEPS_DIR / REQUESTS_DIR).glob(f"*{STATE_SUFFIX}")):
        try:
            out[path.name[:-len(STATE_SUFFIX)]] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
    return out
