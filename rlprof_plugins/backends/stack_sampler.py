"""Sampled Python stacks: the engine thread's stack read at a set rate, kept as nested spans.

torch's ``with_stack`` records an event at every Python call and return of every thread (its
Python tracer): exact, and it slows serving severalfold and lengthens every stop
(docs/performance.md, "Python stacks"). Sampling reads one thread's
stack ``sample_hz`` times a second instead, so what the engine pays grows with the rate, not
with how many calls it makes.

Two ways, measured against each other (``benchmarks/bench_stack_sampling.py``, docs/performance.md):

- ``signal`` (chosen where it can run): a wall-clock interval timer (``setitimer``,
  ``SIGALRM``) whose handler runs on the engine thread itself, which must be the process's main
  thread (Python runs handlers only there; the engines' engine threads are: vLLM's EngineCore
  and workers, SGLang's schedulers). The handler reads its own frame at once: no lock to wait
  for, so a sample lands where the engine is. Installed with ``SA_RESTART``
  (``siginterrupt(False)``), so a system call it interrupts resumes where the kernel restarts
  it (the waits it does not, ``epoll_wait``, ``poll``, ``select``, sleeps and futex waits with a
  timeout, return ``EINTR``: Python retries its own, docs/python-stacks.md names the rest); the
  timer is re-armed each time. Not used where the signal or the timer is already someone else's,
  and given back at the stop only while still its own.
- ``thread``: a sampler thread reads the engine thread's frames (``sys._current_frames``).
  It runs anywhere, but must take the GIL first: it gets it when the engine releases it (a
  torch operator, I/O) or after ``sys.getswitchinterval()``, so samples gather at the engine's GIL
  releases: its shares are further from the truth than the signal timer's (``benchmarks/bench_stack_sampling.py``).

Neither needs ptrace rights (an out-of-process reader such as py-spy needs ``CAP_SYS_PTRACE``
and a binary) nor a particular CPython version. Each wait is the interval times a random
factor in [0.5, 1.5): at a fixed rate, samples lock onto an engine whose iterations have a
fixed period and read the same few moments of every iteration.

What it keeps is what the trace shows: a frame seen in consecutive samples is one span, from
the first sample that saw it to the first that did not (so a parent always holds its
children, as torch's Python events nest), split where the engine begins another iteration so
that every span belongs to one ``rlprof::iteration`` (its ``args.iteration``). Frames are
matched by identity and code (a frame object lives as long as its call), named as torch names
its Python events (``path.py(first line): function``). A span's ``args`` hold its samples and
the time they stand for (``sampled_us``), which the report counts: each sample stands for the
time since the previous sample on the thread. Python runs a signal handler only between
bytecodes, so an alarm that expires during a 50 ms native call (a torch operator, ``.tolist()``,
a tokenizer) is handled once, as the call returns, and the next wait starts there: weighted by
the mean interval, that call would read as one interval; weighted by the time it held the
thread, it reads as the 50 ms it ran. Memory is the finished spans' columns (a few bytes each).
"""

from __future__ import annotations

import os
import random
import signal
import sys
import threading
import time
from array import array
from typing import Any

from ..trace.analysis.python_stacks import SAMPLE_CAT

DEFAULT_HZ = 200  # chosen by measurement: docs/performance.md, "Python stacks"
MAX_HZ = 10_000
# At the default rate, the largest share of the engine thread's time the sampler takes: where one sample costs
# more than this share of the interval (a deep stack, a loaded host), it samples less often instead. A rate the
# user asked for is kept as asked.
COST_BUDGET = 0.01
_PREFIXES = sorted({p for p in sys.path if p and os.path.isabs(p)}, key=len, reverse=True)


def frame_name(code: Any) -> str:
    """A code object's name as torch's Python tracer writes it: the file (after the ``sys.path``
    entry holding it, as torch trims site-packages), the function's first line, its name."""
    path = code.co_filename
    for prefix in _PREFIXES:
        if path.startswith(prefix) and len(path) > len(prefix) and path[len(prefix)] == os.sep:
            path = path[len(prefix) + 1:]
            break
    return f"{path}({code.co_firstlineno}): {code.co_name}"


class StackSampler:
    """Samples the starting thread's Python stack while started; ``events(base_ns)`` gives the
    spans as complete events on that thread's track. ``set_iteration`` (the engine thread, as
    each iteration begins and ends) splits spans and tags them."""

    def __init__(self, hz: int = DEFAULT_HZ, budget: float | None = None) -> None:
        self.interval = 1.0 / hz
        self.budget = budget  # the share of the engine's time the sampler may take (None: no bound, the rate as asked)
        self._cost_ns = 0.0  # one sample's cost, a running average: what the budget is held against
        self.how: str | None = None  # "signal" or "thread", once started
        self.why_thread: str | None = None  # why the signal timer could not be used
        self.target: int | None = None  # the engine thread's ``threading.get_ident()``
        self.native_tid: int | None = None  # its id as Kineto writes it
        self.iteration: int | None = None
        self.samples = 0
        # the time the engine thread spent sampling (the signal timer: inside the handler) or was kept from the
        # GIL by the sampler thread: what the sampler itself costs the engine, written into the trace
        self.busy_ns = 0
        self._first_ns = self._last_ns = 0  # the first and the latest sample's times
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._previous: Any = None  # the SIGALRM handler before ours
        self._jitter = random.Random().uniform
        # finished spans, as columns: start and end (ns), depth, name id, iteration (-1: none), samples, and the
        # time the samples stand for (ns: each sample the time since the one before it)
        self._start, self._end = array("q"), array("q")
        self._depth, self._name, self._iteration, self._count = array("i"), array("i"), array("q"), array("i")
        self._weight = array("q")
        self._names: list[str] = []
        self._ids: dict[Any, int] = {}  # code object -> name id
        # the frames seen in the latest sample, outermost first: [frame id, code, start ns, samples taken
        # before it opened, iteration, the time those samples stood for]; a span's own samples and time are the
        # running totals below at its close minus those at its open (it was seen in every sample in between)
        self._open: list[list] = []
        self._depth_of: dict[int, int] = {}  # frame id -> its depth in ``_open``
        self._weight_total = 0  # the time every sample so far stood for (ns)

    # ---- start and stop (the engine thread) --------------------------------------------
    def start(self, how: str | None = None) -> None:
        """Start sampling the calling thread (the engine's): by signal where it can run, else
        by thread (``why_thread`` says why); ``how`` forces one (the benchmark's comparison)."""
        self.target, self.native_tid = threading.get_ident(), threading.get_native_id()
        self._stopped.clear()
        self.why_thread = None if how == "thread" else signal_unavailable()
        if how == "signal" and self.why_thread:
            raise RuntimeError(f"the signal timer cannot sample here: {self.why_thread}")
        if how != "thread" and self.why_thread is None:
            self.how = "signal"
            self._previous = signal.signal(signal.SIGALRM, self._on_signal)
            signal.siginterrupt(signal.SIGALRM, False)
            signal.setitimer(signal.ITIMER_REAL, self._next_wait())
            return
        self.how = "thread"
        self._thread = threading.Thread(target=self._run, name="rlprof-stack-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling and close the open spans at this moment; waits at most for one sample. The process's
        SIGALRM handler and wall-clock timer are put back as they were only while they are still this sampler's:
        a library that set its own after the start keeps it (disarming its timer, or putting back the default
        handler under it, would let its next alarm end the process)."""
        self._stopped.set()
        if self.how == "signal":
            self._give_back_signal()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
            self._thread = None
        self._close_from(0, time.time_ns())

    def _give_back_signal(self) -> None:
        try:
            if signal.getsignal(signal.SIGALRM) != self._on_signal:
                return  # someone else's handler now, and with it the timer
            signal.setitimer(signal.ITIMER_REAL, 0)
            self._run_pending()  # an alarm that came before the timer was disarmed runs ours (stopped: a no-op)
            signal.signal(signal.SIGALRM, self._previous)
        except (ValueError, OSError):  # not the main thread: ours stays, and does nothing once stopped
            pass

    @staticmethod
    def _run_pending() -> None:
        """A Python call: CPython runs a pending signal's handler as a function begins, so it runs here, while
        the handler is still ours, not after the previous one is back."""

    def set_iteration(self, index: int | None) -> None:
        """The engine thread entered iteration ``index`` (None: left it). Cheap: two attributes."""
        self.iteration = index
        self.target = threading.get_ident()

    def _next_wait(self) -> float:
        """The wait before the next sample: the interval, or longer where the budget says so (a sample of cost c
        every c / budget seconds takes that share of the thread's time), times a random factor."""
        interval = self.interval
        if self.budget:
            interval = max(interval, self._cost_ns / 1e9 / self.budget)
        return interval * self._jitter(0.5, 1.5)

    def _spent(self, ns: int) -> None:
        """One sample took ``ns`` of the engine's time."""
        self.busy_ns += ns
        self._cost_ns += (ns - self._cost_ns) / 8

    # ---- the two ways ------------------------------------------------------------------
    def _on_signal(self, signum: int, frame: Any) -> None:
        """Runs on the engine thread, in the middle of whatever it runs: nothing raises out of it (a bad sample is
        skipped, a timer that cannot be re-armed ends the sampling); a KeyboardInterrupt from a handler that runs
        inside this one still reaches the engine."""
        try:
            if self._stopped.is_set():
                return
            began = time.perf_counter_ns()
            try:
                if frame is not None:
                    self._sample(frame, time.time_ns())
            except Exception:
                pass
            self._spent(time.perf_counter_ns() - began)
            signal.setitimer(signal.ITIMER_REAL, self._next_wait())
        except Exception:
            self._stopped.set()

    def _run(self) -> None:
        next_at = time.monotonic()
        frames = sys._current_frames
        while True:
            next_at += self._next_wait()
            delay = next_at - time.monotonic()
            if delay < 0:  # late (the GIL was held): skip the missed ticks, keep the rate
                next_at -= delay
                delay = 0
            if self._stopped.wait(delay):
                return
            began = time.perf_counter_ns()
            try:
                frame = frames().get(self.target)
                if frame is not None:
                    self._sample(frame, time.time_ns())
            except Exception:  # a sampler never takes the engine down; a bad sample is skipped
                continue
            finally:
                self._spent(time.perf_counter_ns() - began)

    # ---- spans -------------------------------------------------------------------------
    def _sample(self, frame: Any, now: int) -> None:
        """Add one sample of the stack whose innermost frame is ``frame``. Only what changed since the previous
        sample costs anything: the stack is walked from the innermost frame up to the first frame that is
        still open (the same frame object, its code and its caller those of the open span above it), and only
        the spans below that are closed and the new frames opened. A new iteration closes every span."""
        opened, depth_of, iteration = self._open, self._depth_of, self.iteration
        new = []  # the frames this sample sees that are not open, innermost first
        same = 0  # how many open spans, from the outermost, this sample still sees
        walking = frame
        keep = bool(opened) and opened[0][4] == iteration
        while walking is not None:
            depth = depth_of.get(id(walking)) if keep else None
            if depth is not None and opened[depth][1] is walking.f_code:
                # a frame's address is reused by a later call: its code and its caller's identity tell them apart
                caller = walking.f_back
                if (caller is None and depth == 0) or (caller is not None and depth_of.get(id(caller)) == depth - 1
                                                       and opened[depth - 1][1] is caller.f_code):
                    same = depth + 1
                    break
            new.append(walking)
            walking = walking.f_back
        self._close_from(same, now)
        # what this sample stands for: the time since the previous one (the first: one wait as asked)
        weight = now - self._last_ns if self.samples else int(self.interval * 1e9)
        before, weight_before = self.samples, self._weight_total
        for walking in reversed(new):
            depth_of[id(walking)] = len(opened)
            opened.append([id(walking), walking.f_code, now, before, iteration, weight_before])
        if not self.samples:
            self._first_ns = now
        self._last_ns = now
        self.samples += 1
        self._weight_total += weight

    def _close_from(self, depth: int, now: int) -> None:
        """End the open spans from ``depth`` in (innermost first) at ``now``: each holds the samples taken since
        it opened (every one of them saw it)."""
        opened, depth_of = self._open, self._depth_of
        while len(opened) > depth:
            frame_id, code, start, before, iteration, weight_before = opened.pop()
            if depth_of.get(frame_id) == len(opened):
                del depth_of[frame_id]
            name = self._ids.get(code)
            if name is None:
                name = self._ids[code] = len(self._names)
                self._names.append(frame_name(code))
            self._start.append(start)
            self._end.append(now)
            self._depth.append(len(opened))
            self._name.append(name)
            self._iteration.append(-1 if iteration is None else iteration)
            self._count.append(self.samples - before)
            self._weight.append(self._weight_total - weight_before)

    @property
    def spans(self) -> int:
        return len(self._start)

    def description(self) -> dict[str, Any]:
        """What a trace says of its sampler (its ``rlprof_sampler`` metadata): how it sampled, at what rate at
        most and within what share of the engine's time (``budget``), so a reader knows what a sample stands for,
        and once stopped how many samples it took and the engine time they cost (``busy_us``), so a reader knows
        what the sampler itself added to the recording."""
        out: dict[str, Any] = {"how": self.how, "hz": round(1 / self.interval)}
        if self.budget:
            out["budget"] = self.budget
        if self._stopped.is_set():
            out.update(samples=self.samples, busy_us=round(self.busy_ns / 1000.0, 1))
        return out

    def events(self, base_ns: int, pid: int | None = None) -> list[dict[str, Any]]:
        """The spans as complete events (category ``python_sample``) on the sampled thread's track,
        in start order with parents first (as torch writes its Python events), on a trace whose
        times count microseconds from ``base_ns`` (Kineto's clock: wall-clock ns)."""
        pid = os.getpid() if pid is None else pid
        tid = self.native_tid
        out = []
        rows = sorted(zip(self._start, self._depth, self._end, self._name, self._iteration, self._count,
                          self._weight))
        for start, depth, end, name, iteration, count, weight in rows:
            args: dict[str, Any] = {"samples": count, "sampled_us": round(weight / 1000.0, 1), "depth": depth}
            if iteration >= 0:
                args["iteration"] = iteration
            out.append({"ph": "X", "cat": SAMPLE_CAT, "name": self._names[name], "pid": pid, "tid": tid,
                        "ts": round((start - base_ns) / 1000.0, 3), "dur": round((end - start) / 1000.0, 3),
                        "args": args})
        return out


def signal_unavailable() -> str | None:
    """Why the signal timer cannot sample the calling thread (None: it can)."""
    if threading.current_thread() is not threading.main_thread():
        return "the engine thread is not the main thread (Python runs signal handlers only there)"
    if not hasattr(signal, "setitimer"):
        return "this platform has no setitimer"
    if signal.getsignal(signal.SIGALRM) is not signal.SIG_DFL:  # None: one installed outside Python
        return "SIGALRM already has a handler in this process"
    if signal.getitimer(signal.ITIMER_REAL) != (0.0, 0.0):
        return "the process's wall-clock timer is already armed"
    return None
