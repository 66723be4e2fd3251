"""Checks for both engines' servers: a chunked session records what a plain one
records, and a long chunked session is faithful (its pauses marked, its
iterations found by HolisticTraceAnalysis, a valid trace)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from tests.helpers.hta import hta
from tests.helpers.traces import (iteration_indices, load_trace, ops_in_iterations, pause_events, profiler_steps,
                                   python_frames)

ITERATIONS = 8  # one request of 8 tokens: 1 prefill + 7 decode iterations
CHUNK = 3  # 8 iterations in chunks of 3: 3 + 3 + 2


def check_chunked_matches_plain(server, extra: dict, trace_of: Callable[[Path], Path]) -> None:
    """Record the same traffic twice, once as one torch session and once in
    chunks; ``extra``: the engine's way to ask for stacks; ``trace_of(step
    folder)``: the rank's one trace there."""
    from rlprof_plugins.trace.format.check import check

    server.complete(max_tokens=ITERATIONS)  # both runs then find the prompt cached alike
    traces = {}
    for step, chunk in ((40, 0), (41, CHUNK)):
        r = server.post("/start_profile", {"global_step": step, "step_start": 0, "step_end": ITERATIONS,
                                           "chunk_iterations": chunk, **extra})
        assert r.status_code == 200, r.text
        server.complete(max_tokens=ITERATIONS)
        status = server.wait_state()
        assert status["state"] == "done", status
        path = trace_of(server.trace_dir / f"global_step_{step}")
        assert check(path).ok
        traces[chunk] = load_trace(path)
        # every stop of the profiler is marked where the engine waited for it; a chunked session
        # started on an idle engine (vLLM) ends its first chunk at once, and resumes at iteration 0
        causes = [p["args"]["cause"] for p in pause_events(traces[chunk])]
        stops = [c for c in causes if c != "resume"]
        assert len(stops) == status["ranks"][0]["stops"] and causes[-1] == "stop", causes
        assert causes == (["stop"] if chunk == 0 else
                          ["rotation", "rotation", "stop"] if causes[0] != "idle" else
                          ["idle", "resume", "rotation", "rotation", "stop"]), causes
    plain, chunked = traces[0], traces[CHUNK]
    assert iteration_indices(plain) == iteration_indices(chunked) == list(range(ITERATIONS))
    assert profiler_steps(plain) == profiler_steps(chunked) == list(range(ITERATIONS))
    assert ops_in_iterations(plain) == ops_in_iterations(chunked)
    assert python_frames(chunked) > 0 and python_frames(plain) > 0
    assert not (server.trace_dir / "global_step_41" / ".rlprof-chunks").exists()


def only(traces: dict[str, Path]) -> Path:
    (path,) = traces.values()
    return path


LONG, LONG_CHUNK = 30, 8  # 30 iterations in chunks of 8: three rotations and the final stop


def check_long_session_is_faithful(server, extra: dict, trace_of: Callable[[Path], Path]) -> None:
    """A 30-iteration stacks-on session in chunks of 8: one ``rlprof::profiler
    pause`` per stop the status counts, HolisticTraceAnalysis finds the
    iterations (it leaves out the last one), ``rlprof check`` passes."""
    from rlprof_plugins.trace.format.check import check

    r = server.post("/start_profile", {"global_step": 45, "step_start": 0, "step_end": LONG,
                                       "chunk_iterations": LONG_CHUNK, **extra})
    assert r.status_code == 200, r.text
    server.complete(max_tokens=LONG + 4)
    status = server.wait_state()
    assert status["state"] == "done", status
    stops = status["ranks"][0]["stops"]
    path = trace_of(server.trace_dir / "global_step_45")
    trace = load_trace(path)
    assert iteration_indices(trace) == profiler_steps(trace) == list(range(LONG))
    # on an idle engine (vLLM) the first chunk ended at the start and the next began with iteration 0
    pauses = [p for p in pause_events(trace) if p["args"]["cause"] not in ("idle", "resume")
              or p["args"].get("iterations")]
    assert len(pauses) == 4 and stops == len([p for p in pause_events(trace) if p["args"]["cause"] != "resume"])
    assert [p["args"]["iterations"] for p in pauses] == [8, 8, 8, 6]
    found = hta(path.parent, "iterations")
    assert len(found["iterations"]) >= LONG - 1 and found["iterations"][:LONG - 1] == list(range(LONG - 1))
    assert all(found["events_per_iteration"][str(k)] > 0 for k in range(LONG - 1))
    report = check(path)
    assert report.ok, report.errors
