"""A rollout step's long tail on a live server (``metrics/tail.py``), against the step's own trace and what the
client saw.

Four streamed requests, three of ``SHORT`` tokens and one of ``LONG``, reach the engine together as a
rollout's prompts do after a weight update: sent while generation is paused (the engine's own pause route,
which queues what arrives) and released by its resume route once every one has been answered with its headers
and a moment more (sent unpaused, a loaded machine can hand the API server's requests over so far apart that
the long one runs first and alone). All four are prefilled in one batch, so the three short ones end in the
same iteration and the long one then runs alone for exactly ``LONG - SHORT`` iterations: the engine's batch
falls from four to one, below half of its peak for good, and the step's tail is the time only that request
ran. The step's record in the step log must say so: a peak batch of four, ``LONG - SHORT`` tail iterations,
and the tail's length what the step's trace says (within 10%, or two iterations): the whole step is recorded
by a session, and the trace's iteration ranges (torch's clock, the batch each ran) give the time from the end
of the last iteration of four to the end of the last one. The session's files are written once the traffic
is over; a session's step is no baseline for the flight recorder either.

The client's clock is no witness of the tail itself: on a CPU, vLLM sends a lone request's tokens in bursts
(its engine's output thread waits on the busy engine loop), and a loaded machine delays a short answer's last
piece past the long one's. It witnesses the requests that held the step, as ``rlprof report`` gives them (JSON,
CSV and page): the long one first, then the three short ones; the long one's time end to end lies between
what the client saw of it (its first streamed token to its last) and the client's whole wait (its send to its
last token), give or take two iterations. Each stream is read by a client process of its own, so one
stream's reading never holds up another's clock.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import NamedTuple

from tests.helpers.flight import mark, step_record

SHORT, LONG = 20, 200
# the engines' routes that pause generation, queueing what arrives, and resume it
PAUSE = {"vllm": ("/pause?mode=keep", {}), "sglang": ("/pause_generation", {"mode": "in_place"})}
RESUME = {"vllm": ("/resume", {}), "sglang": ("/continue_generation", {})}
# after the last request's headers, how long the API server gets to hand the paused engine every request
HAND_OVER_S = 1.0


def engine_of(server) -> str:
    return "sglang" if "sglang" in type(server).__name__.lower() else "vllm"


def streamed(server, tokens: int) -> list[tuple[float, int]]:
    """One completion of ``tokens`` tokens, streamed (``streaming.pieces``)."""
    from tests.helpers.streaming import pieces, stream_request

    sglang = engine_of(server) == "sglang"
    path, body = stream_request(sglang, tokens, usage=True)
    return pieces(server.url, path, body, server._headers(), sglang)


def check_tail(server, step: int, metrics: bool = False) -> dict:
    """The check above on ``server`` at global step ``step`` (``step + 1`` ends it); the step's tail. ``metrics``:
    the server serves ``/metrics``, whose longest request of the frontend's newest busy period is the long one."""
    # the whole step traced: the session's files are written once the traffic is over, not during it
    r = server.post("/start_profile", {"global_step": step, "step_start": 0, "step_end": None})
    assert r.status_code == 200, r.text
    got = released_together(server, [LONG, SHORT, SHORT, SHORT])
    r = server.post("/stop_profile", {"wait": True})
    assert r.status_code == 200, r.text
    assert server.wait_state()["state"] == "done"
    mark(server, step + 1)
    long_tokens = got[0].pieces
    sent = {k: g.sent for k, g in got.items()}
    assert long_tokens[-1][1] == LONG, long_tokens[-1]
    for k in (1, 2, 3):
        assert got[k].pieces[-1][1] == SHORT, got[k].pieces[-1]
    tail = step_record(Path(server.trace_dir), step)["tail"]
    traced = traced_tail(Path(server.trace_dir) / f"global_step_{step}", LONG - SHORT)
    iteration_ms = traced.ms / traced.iterations
    print(f"tail at step {step}: {tail['tail_ms']:.0f} ms, {tail['tail_iterations']} iterations, peak "
          f"{tail['peak_batch']}; in the trace {traced.ms:.0f} ms, after an iteration of {traced.batch_before}")
    assert tail["peak_batch"] == 4 and traced.batch_before == 4, (tail, traced)
    assert tail["tail_iterations"] == LONG - SHORT, tail
    assert abs(tail["tail_ms"] - traced.ms) <= max(0.1 * traced.ms, 2 * iteration_ms), (tail, traced)
    assert tail["occupancy"][-1] == 1 and max(tail["occupancy"]) >= 3, tail  # sampled moments
    held = requests_held(server, step)
    client_s = long_tokens[-1][0] - sent[0]
    print(f"the requests that held step {step}: {[(r['output_tokens'], r['seconds']) for r in held]}; the long one "
          f"{client_s:.2f} s by the client")
    assert [r["output_tokens"] for r in held] == [LONG, SHORT, SHORT, SHORT], held
    first = held[0]
    # the frontend saw the request from after the client sent it until before its last token reached the client,
    # and at least while its tokens streamed
    streaming_s = long_tokens[-1][0] - long_tokens[0][0]
    slack_s = 2 * iteration_ms / 1e3
    assert streaming_s - slack_s <= first["seconds"] <= client_s + slack_s, (first, streaming_s, client_s)
    assert first["prompt_tokens"] > 0 and 0 < first["first_token_s"] < first["seconds"], first
    if metrics:
        from prometheus_client.parser import text_string_to_metric_families

        scraped = [s.value for family in text_string_to_metric_families(server.get("/metrics").text)
                   for s in family.samples if s.name == "rlprof_longest_request_seconds"]
        assert scraped == [first["seconds"]], scraped
    return tail


class TracedTail(NamedTuple):
    """A step's last iterations as its trace recorded them."""

    ms: float  # from the end of the iteration before them to the end of the last
    iterations: int
    batch_before: int  # the batch of the iteration before them


def traced_tail(step_dir: Path, iterations: int) -> TracedTail:
    """The last ``iterations`` iterations of the step's one worker trace (its manifest's), each of which ran a
    batch of one: how long they took, on torch's clock."""
    from tests.helpers.traces import ITERATION, load_trace, manifest_traces

    (trace,) = manifest_traces(step_dir).values()
    ranges = {}
    for event in load_trace(trace)["traceEvents"]:
        m = ITERATION.match(str(event.get("name", "")))
        if m and event.get("ph") == "X" and m.group(5):
            ranges[int(m.group(1))] = (float(event["ts"]) + float(event["dur"]), int(m.group(5)))
    ordered = [ranges[k] for k in sorted(ranges)]
    assert len(ordered) > iterations, (len(ordered), iterations)
    alone = ordered[-iterations:]
    assert all(batch == 1 for _, batch in alone), [batch for _, batch in alone]
    before_end, before_batch = ordered[-iterations - 1]
    return TracedTail((alone[-1][0] - before_end) / 1e3, iterations, before_batch)


class Stream(NamedTuple):
    """One streamed answer as its client saw it: when it was sent and each piece (``streaming.pieces``)."""

    sent: float
    pieces: list[tuple[float, int]]


def released_together(server, lengths: list[int]) -> dict[int, Stream]:
    """A streamed request of each of ``lengths`` tokens, sent while the engine is paused and released at once by
    its resume route; each read by a client process of its own, so one stream's reading never delays another's
    clock. Keyed by the request's place in ``lengths``."""
    import multiprocessing

    from tests.helpers.streaming import pieces_in_a_process, stream_request

    engine = engine_of(server)
    sglang = engine == "sglang"
    spawn = multiprocessing.get_context("spawn")
    results = spawn.Queue()
    answered = [spawn.Event() for _ in lengths]
    clients = [spawn.Process(target=pieces_in_a_process, daemon=True, args=(
        k, results, server.url, *stream_request(sglang, n, usage=True), server._headers(), sglang, answered[k]))
        for k, n in enumerate(lengths)]
    r = server.post(*PAUSE[engine])
    assert r.status_code == 200, r.text
    try:
        for c in clients:
            c.start()
        assert all(a.wait(120) for a in answered), "a request was never answered"
        time.sleep(HAND_OVER_S)
    finally:
        r = server.post(*RESUME[engine])
        assert r.status_code == 200, r.text
    got, errors = {}, []
    for _ in lengths:
        k, sent, arrived, error = results.get(timeout=300)
        got[k] = Stream(sent, arrived)
        if error:
            errors.append(f"request {k}: {error}")
    for c in clients:
        c.join(30)
    assert not errors, errors
    return got


def requests_held(server, step: int) -> list[dict]:
    """The step's longest requests as ``rlprof report --json`` gives them, once the frontend has written the
    busy period that held them (``metrics/requests.py``), checked against the page and ``requests.csv``."""
    import csv
    import json
    import subprocess
    import sys
    import tempfile

    root = Path(server.trace_dir)
    rlprof = Path(sys.executable).parent / "rlprof"
    deadline = time.time() + 20
    while True:
        with tempfile.TemporaryDirectory() as out:
            done = subprocess.run([str(rlprof), "report", str(root), "--steps", str(step), "--json", f"{out}/r.json",
                                   "--csv", out, "-o", f"{out}/r.html", "--quiet"], capture_output=True, text=True,
                                  timeout=300)
            row = next((r for r in json.loads(Path(out, "r.json").read_text())["steps"] if r["global_step"] == step),
                       {}) if Path(out, "r.json").exists() else {}
            if row.get("requests") or time.time() > deadline:
                assert row.get("requests"), (done.returncode, done.stderr[-2000:])
                with open(Path(out, "requests.csv")) as f:
                    rows = [r for r in csv.DictReader(f) if r["global_step"] == str(step)]
                assert [int(r["output_tokens"]) for r in rows] == [r["output_tokens"] for r in row["requests"]]
                page = Path(out, "r.html").read_text()
                assert "id=requests-held" in page and row["requests"][0]["request_id"] in page
                return row["requests"]
        time.sleep(0.5)
