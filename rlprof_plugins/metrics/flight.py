"""The flight recorder: the last minute of a rank's engine thread, kept all the time, written when it went wrong.

The step that goes wrong in an RL rollout is rarely the one anyone asked to
profile: a long-tail batch, a garbage-collection pause, a preempted host. By
the time a dashboard shows it the step is over and nothing was recorded. So
each engine process that runs iterations (a vLLM worker, an SGLang
scheduler: every rank) keeps, under ``flight_recorder``, a ring of the last
``seconds`` of:

- each iteration: start, end, stage, batch, tokens, requests waiting (where
  the engine says it), and whether a profiling session recorded it;
- rlprof's own pauses (a session's chunk rotations and stops);
- the engine thread's Python stack, read ``sample_hz`` times a second by the
  recorder's own thread (``sys._current_frames``: no signal, no timer, nothing
  to give back, so nothing it does can end the process).

No profiler runs for it. On the engine thread it costs a clock read, one
record appended and a comparison per iteration (docs/performance.md, "Flight
recorder"); its memory is the ring, capped at ``max_mb``.

It writes what it kept (``flight_dump``) when, against the engine's own
recent past:

- ``slow_iteration``: an iteration ran more than ``slow_factor`` times what
  its work predicts, and longer than ``floor_ms``. The work is the tokens it
  prefilled and decoded: RL batches mix prompts of tens and thousands of
  tokens, and a long prompt's prefill is slow because it is large, not
  because anything went wrong. Each stage keeps a rolling fit of its recent
  iterations' time against their tokens (``WorkFit``), and an iteration is
  held against the most generous of that fit, its stage's mean time, and
  that mean scaled up by the tokens;
- ``stall``: no iteration for more than ``stall_seconds`` while the engine
  was not idle (it did not say it waits for work), measured when the next
  iteration begins; an engine still stuck after ``seconds`` is written then,
  marked ``ongoing``;
- ``slow_step``: a finished step's busy time, or a stage's mean iteration,
  above ``slow_factor`` times the median of the five steps before it (three at
  least); a step a session recorded any iteration of is neither compared nor
  a baseline (the profiler's cost is in it);
- ``requested``: ``POST /rlprof/flight_dump``, ``rlprof dump``.

A server's first ``warmup_iterations``, the first iterations after a weight
sync (a new step) and after a profiling session never trigger, nor feed the
medians; a session's iterations neither. Each reason dumps at most once per
``min_interval_seconds`` (``requested`` always). The dump waits
``after_seconds`` past the event (the engine's recovery is part of it) and is
written by the recorder's thread, never the engine's; what else goes wrong within
that time (the first iteration after a stall, slow as the engine recovers) is the
same incident, in the same dump.
"""

from __future__ import annotations

import collections
import sys
import threading
import time
from typing import Any, Callable, NamedTuple

from .._log import logger
from ..stages import DECODE, PREFILL, IterationInfo

SLOW_ITERATION, STALL, SLOW_STEP, REQUESTED = "slow_iteration", "stall", "slow_step", "requested"
REASONS = (SLOW_ITERATION, STALL, SLOW_STEP, REQUESTED)
FLIGHT_DUMP_PATH = "/rlprof/flight_dump"  # the route a dump is asked for by, on both engines
STAGE_NAMES = ("all", PREFILL, DECODE)  # an iteration's stage code in the ring: 0 unknown, 1 prefill, 2 decode
ENTRY_BYTES = 256  # an iteration in the ring, its eight numbers included, rounded up (docs/performance.md)
SAMPLE_SHARE = 16  # of ``max_mb``, a sixteenth is left to the stack samples and the pauses
MIN_BASELINE = 8  # iterations of a stage before its fit is trusted
BASELINE_SIZE = 64  # the rolling fit's window, per stage
MIN_STEPS = 3  # finished steps before a step's median is trusted
STEPS_KEPT = 5  # a step is held against the median of the five before it (a rollout's load drifts over a run)


class Anomaly(NamedTuple):
    """What triggered a dump, in the recorder's terms (``flight_dump`` writes it as ``anomaly.json``)."""

    reason: str
    stage: str | None
    iteration: int | None  # the recorder's count of this process's iterations
    global_step: int | None  # the step it belongs to (its folder)
    duration_ms: float | None  # what was measured: the iteration, the stall, the step's busy time
    baseline_ms: float | None  # what it was compared with: the rolling median (the limit, for a stall)
    start_ns: int  # the event, in wall-clock nanoseconds
    end_ns: int
    ongoing: bool = False  # a stall still going when written
    detail: str = ""  # e.g. which of a step's numbers was slow
    folder_hint: str | None = None  # a requested dump's folder name, the same on every rank

    @property
    def factor(self) -> float | None:
        if not self.duration_ms or not self.baseline_ms:
            return None
        return round(self.duration_ms / self.baseline_ms, 2)


class RingIteration(NamedTuple):
    """One iteration as the ring keeps it."""

    number: int  # the recorder's count of this process's iterations
    start_ns: int  # wall clock
    end_ns: int
    prefill: int  # tokens prefilled (-1: the engine did not say)
    decode: int  # tokens decoded
    batch: int  # requests in the batch
    waiting: int  # requests the engine held back (-1: the engine does not say)
    profiled: bool  # a profiling session recorded it


class StackSample(NamedTuple):
    """The engine thread's stack at one moment."""

    at_ns: int  # wall clock
    codes: tuple  # the frames' code objects, outermost first
    iteration: int | None  # the iteration open then (None: between iterations)


class WorkFit:
    """What one stage's iterations take for their work: the last ``BASELINE_SIZE`` iterations' tokens
    (``x``) and nanoseconds (``y``), kept as exact integer sums so each iteration adds and drops one point
    in constant time.

    ``predict(x)`` is the most generous of three readings of that past: the least-squares line of time
    against tokens (where the tokens varied enough to draw one), the stage's mean time (an iteration
    smaller than usual is not held to less), and that mean scaled by the tokens (an iteration larger than
    any seen costs at least in proportion). So a long prompt's prefill is never slow for its length, and
    an iteration that froze is slow against any of them."""

    __slots__ = ("xs", "ys", "n", "sx", "sy", "sxx", "sxy", "_next")

    def __init__(self) -> None:
        self.xs: list[int] = []
        self.ys: list[int] = []
        self.n = self.sx = self.sy = self.sxx = self.sxy = 0
        self._next = 0

    def add(self, x: int, y: int) -> None:
        if len(self.xs) < BASELINE_SIZE:
            self.xs.append(x)
            self.ys.append(y)
        else:
            i = self._next
            ox, oy = self.xs[i], self.ys[i]
            self.sx -= ox
            self.sy -= oy
            self.sxx -= ox * ox
            self.sxy -= ox * oy
            self.n -= 1
            self.xs[i], self.ys[i] = x, y
            self._next = (i + 1) % BASELINE_SIZE
        self.n += 1
        self.sx += x
        self.sy += y
        self.sxx += x * x
        self.sxy += x * y

    def predict(self, x: int) -> float:
        """The time (ns) this stage's recent past says ``x`` tokens take."""
        n = self.n
        if n == 0:
            return 0.0
        mean_y = self.sy / n
        best = mean_y * max(1.0, x / (self.sx / n)) if self.sx > 0 else mean_y
        spread = n * self.sxx - self.sx * self.sx  # n^2 times the variance of the tokens
        if spread > 0 and spread * 400 > self.sx * self.sx:  # the tokens varied by more than 5% of their mean
            slope = (n * self.sxy - self.sx * self.sy) / spread
            if slope > 0:
                best = max(best, mean_y + slope * (x - self.sx / n))
        return best


class FlightRecorder:
    """One rank's ring and triggers; ``begin``/``end``/``idle`` on the engine thread, the rest from
    its own thread. ``write(anomaly, window)`` is told to write a dump (``flight_dump.DumpWriter``)."""

    def __init__(self, settings: dict[str, Any], write: Callable[["Anomaly", "Window"], None],
                 clock: Callable[[], int] = time.time_ns) -> None:
        self.settings = settings
        self._write = write
        self._clock = clock
        self.seconds = float(settings["seconds"])
        self.window_ns = int(self.seconds * 1e9)
        self.factor = float(settings["slow_factor"])
        self.floor_ns = int(settings["floor_ms"] * 1e6)
        self.stall_ns = int(settings["stall_seconds"] * 1e9)
        self.after_ns = int(settings["after_seconds"] * 1e9)
        self.min_interval_ns = int(settings["min_interval_seconds"] * 1e9)
        self.warmup = int(settings["warmup_iterations"])
        # iterations left out after a weight sync or a profiling session (the engine settling)
        self.settle = max(2, self.warmup // 10)
        cap = max(1000, int(settings["max_mb"]) * (1 << 20) * (SAMPLE_SHARE - 1) // SAMPLE_SHARE // ENTRY_BYTES)
        self.iterations: collections.deque[RingIteration] = collections.deque(maxlen=cap)
        self.pauses: collections.deque = collections.deque(maxlen=1000)
        hz = int(settings["sample_hz"])
        self.interval = 1.0 / hz
        self.samples: collections.deque[StackSample] = collections.deque(maxlen=max(10, int(hz * self.seconds * 1.5)))
        self.count = 0  # iterations this process ran (the ring's numbering)
        self.step: int | None = None
        self.profiling = False  # a session records the iterations now (set by the engine's patch)
        self._unjudged = self.warmup  # iterations still to pass before any triggers (warm-up, settling)
        self._step_profiled = False  # a session recorded an iteration of the open step
        self._open = 0  # the open iteration's start (0: none)
        self._last_end = 0
        self._idle = True  # the engine said it waits for work since the last iteration
        self._waiting = -1
        self._fits: dict[int, WorkFit] = {}  # per stage code
        self._steps: collections.deque = collections.deque(maxlen=STEPS_KEPT)  # finished steps' numbers
        self._last_dump: dict[str, int] = {}
        self._pending: list[Anomaly] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self.target: int | None = None  # the engine thread
        self.native_tid: int | None = None
        self.failed: str | None = None
        self.dumps = 0
        self._hung_reported = 0  # the start of the stall already written as ongoing
        self._thread = threading.Thread(target=self._run, name="rlprof-flight-recorder", daemon=True)
        self._thread.start()

    # ---- the engine thread -------------------------------------------------------------
    def begin(self, waiting: int = -1) -> None:
        now = self._clock()
        if self.target is None:
            self.target, self.native_tid = threading.get_ident(), threading.get_native_id()
        last = self._last_end
        if last and not self._idle and now - last > self.stall_ns and not self._unjudged:
            self._trigger(Anomaly(STALL, None, self.count, self.step, (now - last) / 1e6, self.stall_ns / 1e6,
                                  last, now))
        self._idle = False
        self._waiting = waiting
        self._open = now

    def end(self, info: IterationInfo | None) -> None:
        started = self._open
        if not started:
            return
        now = self._clock()
        self._open = 0
        self._last_end = now
        ns = now - started
        if info is None:
            code, prefill, decode, batch = 0, -1, 0, 0
        else:
            prefill, decode, batch = info
            code = 1 if prefill > 0 else 2
        self.count += 1
        iterations = self.iterations
        iterations.append(RingIteration(self.count, started, now, prefill, decode, batch, self._waiting,
                                        self.profiling))
        oldest = now - self.window_ns
        while iterations[0].end_ns < oldest:
            iterations.popleft()
        if self.profiling:
            self._unjudged = max(self._unjudged, self.settle)  # the first iterations after a session neither
            self._step_profiled = True
            return
        if self._unjudged:
            self._unjudged -= 1
            return
        work = prefill + decode if prefill >= 0 else batch  # tokens where the engine says them, else requests
        fit = self._fits.get(code)
        if fit is None:
            fit = self._fits[code] = WorkFit()
        if ns > self.floor_ns and fit.n >= MIN_BASELINE:
            predicted = fit.predict(work)
            if ns > self.factor * predicted:
                self._trigger(Anomaly(SLOW_ITERATION, STAGE_NAMES[code], self.count, self.step, ns / 1e6,
                                      predicted / 1e6, started, now))
                return  # an anomaly is no part of what the stage's work normally takes
        fit.add(work, ns)

    def idle(self) -> None:
        """The engine is about to wait for work: the gap until the next iteration is not a stall."""
        self._idle = True

    # ---- where the step moves, pauses (the engine thread, rarely) ------------------------
    def step_changed(self, step: int | None) -> None:
        self.step = step
        self._unjudged = max(self._unjudged, self.settle)  # the first iterations after a weight sync
        self._step_profiled = False

    def step_finished(self, step: int | None, busy_ms: float, stage_means: dict[str, float]) -> None:
        """A step's numbers: slow against the steps before it? (then kept for the next). A step a session
        recorded any iteration of is neither: the profiler's own cost is in its busy time."""
        if self._step_profiled or self.profiling:
            return
        previous = list(self._steps)
        self._steps.append((busy_ms, stage_means))
        if len(previous) < MIN_STEPS:
            return
        now = self._clock()
        start = now - int(min(busy_ms * 1e6, self.window_ns))
        baseline = _median([b for b, _ in previous])
        if baseline > 0 and busy_ms > self.factor * baseline:
            self._trigger(Anomaly(SLOW_STEP, None, self.count, step, busy_ms, baseline, start, now,
                                  detail="busy time"))
            return
        for stage, mean in sorted(stage_means.items()):
            before = [m[stage] for _, m in previous if stage in m]
            if len(before) >= MIN_STEPS:
                baseline = _median(before)
                if baseline > 0 and mean > self.factor * baseline and mean * 1e6 > self.floor_ns / 10:
                    self._trigger(Anomaly(SLOW_STEP, stage, self.count, step, mean, baseline, start, now,
                                          detail=f"mean {stage} iteration"))
                    return

    def pause(self, pause: Any) -> None:
        """One of rlprof's own pauses (a ``trace.format.pauses.Pause``), kept for the dump's trace."""
        self.pauses.append(pause)

    def request(self, folder: str | None = None) -> Anomaly:
        """A dump asked for (``POST /rlprof/flight_dump``): the ring as it is, and a little after."""
        now = self._clock()
        anomaly = Anomaly(REQUESTED, None, self.count, self.step, None, None, now, now, folder_hint=folder)
        self._trigger(anomaly)
        return anomaly

    def _trigger(self, anomaly: Anomaly) -> None:
        """Queue a dump for the recorder's thread (rate-limited per reason; never raises). An event inside the
        window of a dump still waiting to be written (its ``after_seconds``: the engine's recovery, such as the
        first slow iteration after a stall) is that incident's, and in that dump already: no second dump."""
        try:
            with self._lock:  # the engine thread and the recorder's (an ongoing stall) both trigger
                if anomaly.reason != REQUESTED:
                    if any(p.reason != REQUESTED and p.start_ns <= anomaly.start_ns <= p.end_ns + self.after_ns
                           for p in self._pending):  # (a slow step that began before it is not: it holds more)
                        return
                    last = self._last_dump.get(anomaly.reason)
                    if last is not None and anomaly.end_ns - last < self.min_interval_ns:
                        return
                    self._last_dump[anomaly.reason] = anomaly.end_ns
                self._pending.append(anomaly)
            self._wake.set()
        except Exception as e:
            self._fail(e)

    # ---- the recorder's thread ---------------------------------------------------------
    def _run(self) -> None:
        frames = sys._current_frames
        while not self._stopped.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            try:
                target = self.target
                if target is not None:
                    frame = frames().get(target)
                    if frame is not None:
                        self._sample(frame)
                self._check_hung()
                self._write_due()
            except Exception as e:  # the recorder stops; the engine never sees it
                self._fail(e)
                return

    def _sample(self, frame: Any) -> None:
        codes = []
        while frame is not None:
            codes.append(frame.f_code)
            frame = frame.f_back
        codes.reverse()
        self.samples.append(StackSample(self._clock(), tuple(codes), self.count + 1 if self._open else None))

    def _check_hung(self) -> None:
        """An engine stuck past the ring's length (in an iteration, or between two while not idle) is
        written now, marked ongoing: its next iteration may never come."""
        now = self._clock()
        since = self._open or (0 if self._idle else self._last_end)
        if since and now - since > self.window_ns and self._hung_reported != since and not self._unjudged:
            self._hung_reported = since
            self._trigger(Anomaly(STALL, None, self.count, self.step, (now - since) / 1e6, self.stall_ns / 1e6,
                                  since, now, ongoing=True))

    def _write_due(self, force: bool = False) -> None:
        if not self._pending:
            return
        now = self._clock()
        with self._lock:
            due = [a for a in self._pending if force or now >= a.end_ns + self.after_ns]
            self._pending = [a for a in self._pending if a not in due]
        for anomaly in due:
            window = self.window(anomaly, now)
            try:
                self._write(anomaly, window)
                self.dumps += 1
            except Exception as e:  # one line; the dump is dropped, serving goes on
                logger.warning("rlprof: flight recorder dump (%s) not written: %s: %s", anomaly.reason,
                               type(e).__name__, e)

    def window(self, anomaly: Anomaly, now: int) -> "Window":
        """What the ring holds from ``seconds`` before the event's end to now (the event's start
        at the latest, for a step longer than the ring)."""
        start = min(anomaly.start_ns, anomaly.end_ns - self.window_ns)
        iterations = [i for i in list(self.iterations) if i.end_ns >= start]
        samples = [s for s in list(self.samples) if s.at_ns >= start]
        pauses = [p for p in list(self.pauses) if getattr(p, "end_ns", 0) >= start]
        start = min([i.start_ns for i in iterations[:1]] + [s.at_ns for s in samples[:1]] + [anomaly.start_ns])
        return Window(start, now, iterations, samples, pauses, self._open or None, self.count + 1, self.native_tid)

    # ---- life ----------------------------------------------------------------------------
    def close(self, timeout: float = 5.0, write: bool = True) -> None:
        """Stop the thread, then write what is queued (at exit; ``write`` False: drop it, e.g. on the engine
        thread, which never writes)."""
        self._stopped.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        if write:
            try:
                self._write_due(force=True)
            except Exception:
                pass

    def _fail(self, e: BaseException) -> None:
        if self.failed is None:
            self.failed = f"{type(e).__name__}: {e}"
            logger.warning("rlprof: flight recorder stopped: %s (serving goes on)", self.failed)


class Window(NamedTuple):
    """The part of the ring a dump writes."""

    start_ns: int
    end_ns: int
    iterations: list[RingIteration]  # oldest first
    samples: list[StackSample]
    pauses: list  # ``Pause``s
    open_since_ns: int | None  # an iteration still open when written (a stall inside one)
    open_index: int  # its number
    tid: int | None  # the engine thread's id as the kernel (and a Kineto trace) names it


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else 0.0
