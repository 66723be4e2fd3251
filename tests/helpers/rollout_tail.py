"""A rollout step's long tail on a live server (``metrics/tail.py``), against what the client saw.

Four requests sent at once, as a rollout sends its prompts: three of ``SHORT`` tokens and one of ``LONG``.
Once the three end, the long one runs alone: the engine's batch falls from four to one, below half of its peak
for good, and the step's tail is the time only that request ran. The step's record in the step log must say
so: a peak batch of four, the tail's iterations the long request's extra tokens (one iteration each, within
two), and the tail's length what the client measured between the last short answer and the long one (within
10%, or two iterations). The step is recorded by a session too, so the flight recorder never holds it
against the steps before it (a session's step is no baseline), and the tail holds for traced steps.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from tests.helpers.flight import mark, step_record

SHORT, LONG = 20, 200


def check_tail(server, step: int) -> dict:
    """The check above on ``server`` at global step ``step`` (``step + 1`` ends it); the step's tail."""
    r = server.post("/start_profile", {"global_step": step})
    assert r.status_code == 200, r.text
    ended: dict[int, float] = {}

    def one(k: int, tokens: int) -> None:
        server.complete(max_tokens=tokens)
        ended[k] = time.perf_counter()

    traffic = [threading.Thread(target=one, args=(k, LONG if k == 0 else SHORT)) for k in range(4)]
    for t in traffic:
        t.start()
    for t in traffic:
        t.join()
    assert server.wait_state()["state"] in ("done", "failed")  # the session (a window of the server's) is over
    mark(server, step + 1)
    tail = step_record(Path(server.trace_dir), step)["tail"]
    alone_ms = (ended[0] - max(ended[k] for k in (1, 2, 3))) * 1e3
    iteration_ms = tail["tail_ms"] / max(tail["tail_iterations"], 1)
    print(f"tail at step {step}: {tail['tail_ms']:.0f} ms, {tail['tail_iterations']} iterations, peak "
          f"{tail['peak_batch']}; the long request alone {alone_ms:.0f} ms by the client's clock")
    assert tail["peak_batch"] == 4, tail
    assert abs(tail["tail_iterations"] - (LONG - SHORT)) <= 2, tail
    assert abs(tail["tail_ms"] - alone_ms) <= max(0.1 * alone_ms, 2 * iteration_ms), (tail, alone_ms)
    assert tail["occupancy"][0] == 4 and tail["occupancy"][-1] == 1, tail
    return tail
