"""A workload of known truth for Python stacks: functions that run for set shares of each iteration, in Python
and in one native call.

``run_iterations`` drives a ``ProfilerController`` the way an engine's hooks do (``begin_iteration``,
the work, ``end_iteration``) on the calling thread, each iteration ``ITERATION_S`` long: ``spin_a``
30%, ``spin_b`` 25%, ``spin_c`` 15%, ``spin_d`` 10% in Python, and ``native_call`` 20% in one C call that
holds the GIL and runs no bytecode (``sum`` over a ``range``, sized to the time): no signal handler runs
inside it, so the sampler's alarm waits for it to return, as it waits for a torch operator, ``.tolist()`` or
a tokenizer. The spin reads the clock every few thousand additions, so torch's exact tracer (an event per
call) records a few thousand calls, not millions.
``shares`` reads them back from the report's own per-stage Python view (``trace.analysis.python_stacks``).

The truth is what each function actually ran, timed around every call (``measured_shares``), not the
nominal shares: a spin ends at the first clock read past its deadline, so a process descheduled near one
overshoots it by a scheduler quantum, and on a busy host the short functions gain share (a 12-iteration
run read spin_d at 17.8% beside a CPU-bound neighbour). Both the exact tracer and the sampler are held to
the time the functions really took.
"""

from __future__ import annotations

import time
from typing import Any

SHARES = {"spin_a": 0.3, "spin_b": 0.25, "spin_c": 0.15, "spin_d": 0.1, "native_call": 0.2}
ITERATION_S = 0.05


def _spin(seconds: float) -> int:
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        for _ in range(2000):
            n += 1
    return n


def spin_a(seconds: float) -> int:
    return _spin(seconds)


def spin_b(seconds: float) -> int:
    return _spin(seconds)


def spin_c(seconds: float) -> int:
    return _spin(seconds)


def spin_d(seconds: float) -> int:
    return _spin(seconds)


_PER_ITEM_S: list[float] = []  # what ``sum`` takes an item here, measured once


def native_call(seconds: float) -> int:
    """About ``seconds`` in one C call with the GIL held: Python runs no handler until it returns."""
    if not _PER_ITEM_S:
        began = time.perf_counter()
        sum(range(200_000))
        _PER_ITEM_S.append((time.perf_counter() - began) / 200_000)
    return sum(range(max(1, int(seconds / _PER_ITEM_S[0]))))


SPINS = {"spin_a": spin_a, "spin_b": spin_b, "spin_c": spin_c, "spin_d": spin_d, "native_call": native_call}


# A share's sampling error, bounded: a sample falls in a function with the probability of that function's share
# of the time, independently at worst (jittered sampling errs less), so a share p read from N samples has a standard
# error of at most sqrt(p (1 - p) / N). For a share of 40% (above the largest here) to stay within 3 points of the
# truth at 4.5 standard errors (a chance of 7 in a million each time), N >= 0.24 / (3 / 4.5 / 100)^2 = 5,400.
# The native call is sampled once an iteration, as it returns, and that sample stands for the time since the
# one before: the call's whole time, plus at most one wait (1.5 / KNOWN_TRUTH_HZ = 0.6 ms) of the work before it,
# which is the function before it's loss: under 0.6 ms of a 50 ms iteration, 1.2 points at the very worst.
MIN_SAMPLES = 5400
# The known-truth runs ask for 2,500 samples a second over 120 iterations (6 s): about 12,000 samples on a quiet
# 2-core host, about half that with a CPU-bound neighbour taking one core (a pending alarm waits for the process).
KNOWN_TRUTH_HZ, KNOWN_TRUTH_ITERATIONS = 2500, 120


def samples_in(events: list[dict[str, Any]]) -> int:
    """How many samples a trace's sampled spans hold: each sample counts once in an outermost span."""
    from rlprof_plugins.trace.analysis.python_stacks import SAMPLE_CAT

    return sum(e["args"]["samples"] for e in events if e.get("cat") == SAMPLE_CAT and e["args"]["depth"] == 0)


MEASURED: dict[str, float] = {}  # seconds each spin ran since ``run_iterations`` began, timed around each call


def one_iteration(seconds: float = ITERATION_S) -> None:
    for name, share in SHARES.items():
        began = time.perf_counter()
        SPINS[name](share * seconds)
        MEASURED[name] = MEASURED.get(name, 0.0) + time.perf_counter() - began


def run_iterations(controller: Any, count: int, seconds: float = ITERATION_S) -> None:
    MEASURED.clear()
    for _ in range(count):
        controller.begin_iteration()
        one_iteration(seconds)
        controller.end_iteration()


def measured_shares() -> dict[str, float]:
    """Each spin's share (percent) of what the five ran in the last ``run_iterations``, as timed."""
    whole = sum(MEASURED.values())
    return {name: 100.0 * MEASURED.get(name, 0.0) / whole for name in SHARES}


def shares(python_stage: dict[str, Any]) -> dict[str, float]:
    """The spin functions' shares (percent) of their total time in one stage of ``TraceStats.python``."""
    totals = {name.rsplit(": ", 1)[-1]: us for name, us in python_stage["total"].items()}
    spins = {name: totals.get(name, 0.0) for name in SHARES}
    whole = sum(spins.values())
    assert whole > 0, python_stage["total"]
    return {name: 100.0 * us / whole for name, us in spins.items()}


def stages_a_sample_must_reach(trace: dict[str, Any]) -> set[str]:
    """The stages holding an iteration that the signal timer's sampler cannot miss.

    Why a sample must land in such an iteration: the timer is one-shot; each sample's handler re-arms it with a
    wait of at most ``1.5 / sample_hz`` (``StackSampler._next_wait``), and Python runs the handler on the engine
    thread at its next bytecode check after the expiry. rlprof tags the sampler with the iteration before its
    ``rlprof::iteration`` range opens and clears the tag after the range closes, in Python, on that thread
    (``Recording.enter_iteration``/``leave_iteration``). So take an iteration whose range lasts longer than the
    longest wait: if the last handler before the iteration ran at ``h``, the next expiry is at most
    ``h + 1.5 / sample_hz``; either it fell before the iteration and is still pending when it begins (a handler
    running in between would have been a later one), or it falls inside it. Either way its handler runs at a
    bytecode check before the tag is cleared, and that sample is the iteration's. A busy host only lengthens
    iterations. This holds for the signal timer on the engine's main thread (the trace's ``rlprof_sampler``
    says which ran), not for a sampler thread, which waits for the GIL."""
    from tests.helpers.traces import ITERATION

    sampler = trace.get("rlprof_sampler")
    assert sampler is not None, "the trace names no sampler (its metadata ``rlprof_sampler``)"
    assert sampler["how"] == "signal", sampler  # the engines' engine threads are their main threads
    # a rate the test asked for (``sample_hz``): at the default rate the sampler may wait longer (its budget)
    assert "budget" not in sampler, sampler
    longest_wait_us = 1.5e6 / sampler["hz"]
    out = set()
    for e in trace["traceEvents"]:
        m = ITERATION.match(str(e.get("name", "")))
        if m and m.group(2) and e.get("ph") == "X" and e["dur"] > longest_wait_us:
            out.add(m.group(2))
    return out


def assert_sampled_on_engine_thread(path: Any, any_of: tuple[str, ...]) -> tuple[dict[str, Any], set[str]]:
    """A live session's rank trace recorded with ``python_stacks: "sampled"``: torch's own Python events
    absent, the sampled frames on the thread that ran the iterations, each frame inside its parent, and among
    them one of the engine's own functions (``any_of``); every stage a sample must reach
    (``stages_a_sample_must_reach``) in the report's per-stage view. Returns that view and those stages."""
    from rlprof_plugins.trace.analysis.python_stacks import SAMPLE_CAT
    from rlprof_plugins.trace.analysis.trace_stats import trace_stats
    from tests.helpers.traces import load_trace

    trace = load_trace(path)
    must = stages_a_sample_must_reach(trace)
    events = trace["traceEvents"]
    assert not [e for e in events if e.get("cat") == "python_function"], "torch's exact stacks were recorded"
    samples = [e for e in events if e.get("cat") == SAMPLE_CAT]
    iterations = [e for e in events if str(e.get("name", "")).startswith("rlprof::iteration")]
    assert samples and iterations
    assert {(e["pid"], e["tid"]) for e in samples} == {(e["pid"], e["tid"]) for e in iterations}
    open_: list[dict] = []
    for e in samples:
        del open_[e["args"]["depth"]:]
        assert len(open_) == e["args"]["depth"] and (not open_ or open_[-1]["ts"] <= e["ts"]), e
        open_.append(e)
    names = {e["name"].rsplit(": ", 1)[-1] for e in samples}
    assert names & set(any_of), sorted(names)[:50]
    st = trace_stats(path, "rank0", None)
    assert st.python_stacks == "sampled" and st.python, st.error
    assert must <= set(st.python), (must, sorted(st.python))
    return st.python, must
