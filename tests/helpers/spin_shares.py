"""A workload of known truth for Python stacks: four functions that spin for set shares of each iteration.

``run_iterations`` drives a ``ProfilerController`` the way an engine's hooks do (``begin_iteration``,
the work, ``end_iteration``) on the calling thread, each iteration ``ITERATION_S`` long: ``spin_a``
40%, ``spin_b`` 30%, ``spin_c`` 20%, ``spin_d`` 10%. The spin reads the clock every few thousand
additions, so torch's exact tracer (an event per call) records a few thousand calls, not millions.
``shares`` reads them back from the report's own per-stage Python view (``trace.python_stacks``).
"""

from __future__ import annotations

import time
from typing import Any

SHARES = {"spin_a": 0.4, "spin_b": 0.3, "spin_c": 0.2, "spin_d": 0.1}
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


SPINS = {"spin_a": spin_a, "spin_b": spin_b, "spin_c": spin_c, "spin_d": spin_d}


def one_iteration(seconds: float = ITERATION_S) -> None:
    for name, share in SHARES.items():
        SPINS[name](share * seconds)


def run_iterations(controller: Any, count: int, seconds: float = ITERATION_S) -> None:
    for _ in range(count):
        controller.begin_iteration()
        one_iteration(seconds)
        controller.end_iteration()


def shares(python_stage: dict[str, Any]) -> dict[str, float]:
    """The spin functions' shares (percent) of their total time in one stage of ``TraceStats.python``."""
    totals = {name.rsplit(": ", 1)[-1]: us for name, us in python_stage["total"].items()}
    spins = {name: totals.get(name, 0.0) for name in SHARES}
    whole = sum(spins.values())
    assert whole > 0, python_stage["total"]
    return {name: 100.0 * us / whole for name, us in spins.items()}


def assert_sampled_on_engine_thread(path: Any, any_of: tuple[str, ...]) -> dict[str, Any]:
    """A live session's rank trace recorded with ``python_stacks: "sampled"``: torch's own Python events
    absent, the sampled frames on the thread that ran the iterations, each frame inside its parent, and among
    them one of the engine's own functions (``any_of``); the report's per-stage view of them."""
    from rlprof_plugins.trace.python_stacks import SAMPLE_CAT
    from rlprof_plugins.trace.trace_stats import trace_stats
    from tests.helpers.traces import load_trace

    events = load_trace(path)["traceEvents"]
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
    return st.python
