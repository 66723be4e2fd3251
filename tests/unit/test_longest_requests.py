"""The requests that held a step (``metrics/requests.py``): a frontend's busy periods, each with its longest
requests, written when nothing is in flight, joined to the steps by time in the report (JSON, ``requests.csv``,
the page in headless Chromium); and the frontend patches' wrappers, which never let a failure of theirs reach
the engine's call.

The live checks (a rollout on vLLM and SGLang with one response ten times longer than the rest, named first
with the time the client saw) are ``tests/helpers/rollout_tail.py``'s, run by each engine's TP=1 tests.
"""

from __future__ import annotations

import csv
import json
import time
from types import SimpleNamespace

from rlprof_plugins.cli.command import main as rlprof
from rlprof_plugins.metrics.requests import LongestRequests
from rlprof_plugins.step_logs.requests import longest_of, read_periods


def finish(keeper: LongestRequests, request_id: str, arrived: float, first: float, ended: float,
           output_tokens: int) -> None:
    keeper.arrived(request_id, arrived)
    keeper.first_tokens(["someone-else", request_id], first)
    keeper.finished(request_id, 16, output_tokens, at=ended)


def test_a_busy_period_keeps_its_longest_requests_and_is_written_when_nothing_is_in_flight(tmp_path):
    keeper = LongestRequests(tmp_path, "frontend-1", keep=3)
    for k, seconds in enumerate([1.0, 9.0, 2.0, 7.0, 3.0]):
        finish(keeper, f"r{k}", 100.0, 100.5, 100.0 + seconds, output_tokens=int(seconds * 10))
    keeper.arrived("aborted", 101.0)  # never finishes: forgotten when the frontend idles, never counted
    assert read_periods(tmp_path) == []  # the period is open: nothing written yet
    keeper.idle()
    assert keeper.arrivals == {} and keeper.awaiting_first == set()
    finish(keeper, "next", 200.0, 200.1, 200.4, output_tokens=4)
    keeper.close()
    first, second = read_periods(tmp_path)
    assert (first.started_at, first.ended_at, first.requests) == (100.0, 109.0, 5)
    assert [(r.request_id, r.seconds, r.output_tokens) for r in first.longest] == [
        ("r1", 9.0, 90), ("r3", 7.0, 70), ("r4", 3.0, 30)]
    assert first.longest[0].first_token_s == 0.5 and first.longest[0].prompt_tokens == 16
    assert second.requests == 1 and second.longest[0].request_id == "next"
    assert [r.request_id for r in longest_of([first, second], 99.0, 150.0)] == ["r1", "r3", "r4"]
    assert [r.request_id for r in longest_of([first, second], 150.0, 250.0)] == ["next"]
    assert scraped(tmp_path) == {("rlprof_requests_finished_total", "frontend-1"): 6,
                                 ("rlprof_longest_request_seconds", "frontend-1"): 0.4}  # the newest period's


def scraped(root) -> dict[tuple[str, str], float]:
    """The frontends' series as a Prometheus scrape of ``/metrics`` reads them (``metrics/series.py``)."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from rlprof_plugins.metrics.series import register

    registry = CollectorRegistry()
    register(root, registry)
    return {(s.name, s.labels["frontend"]): round(s.value, 6)
            for family in text_string_to_metric_families(generate_latest(registry).decode())
            for s in family.samples if "frontend" in s.labels}


def test_traffic_that_never_stops_is_cut_into_periods_and_a_torn_line_is_skipped(tmp_path):
    keeper = LongestRequests(tmp_path, "frontend-1", keep=2, period_seconds=10.0)
    for k in range(30):  # a request finishing every second, one always in flight
        finish(keeper, f"r{k}", 1000.0 + k, 1000.0 + k + 0.1, 1000.0 + k + 1.5, output_tokens=k)
    keeper.close()
    with open(keeper.path, "a") as f:
        f.write('{"started_at": 1')  # a crash mid-write
    periods = read_periods(tmp_path)
    assert len(periods) >= 3 and sum(p.requests for p in periods) == 30
    assert all(p.ended_at - p.started_at <= 10.0 + 1.5 for p in periods)
    # a file that cannot be read (here a folder by a log's name) is skipped; the others are read as before
    (keeper.path.parent / "frontend-2.jsonl").mkdir()
    assert read_periods(tmp_path) == periods


def test_a_long_request_in_flight_across_the_bound_is_kept_in_the_period_it_ends_in(tmp_path):
    """Traffic that never stops (async RL, agentic rollouts): a long stream arrives first, short requests keep
    arriving and ending around it for longer than the bound, so periods are cut while the stream runs. The
    stream is named in the period it ends in, with its own arrival; an aborted request is forgotten at a cut,
    where the frontend says what is still in flight (vLLM passes no arrival time of its own at the end)."""
    running: set[str] = set()
    keeper = LongestRequests(tmp_path, "frontend-1", keep=2, period_seconds=10.0, in_flight=lambda: running)

    def arrive(request_id: str, at: float) -> None:
        running.add(request_id)
        keeper.arrived(request_id, at)

    def end(request_id: str, at: float, tokens: int) -> None:
        running.discard(request_id)
        keeper.finished(request_id, 16, tokens, at=at)

    arrive("long-stream", 1000.0)
    arrive("aborted", 1000.5)
    running.discard("aborted")  # the client went away: the frontend no longer holds it, no end is reported
    for k in range(35):  # a short request every second, each overlapping the next
        arrive(f"short{k}", 1001.0 + k)
        if k:
            end(f"short{k - 1}", 1001.0 + k + 0.5, 5)
    end("long-stream", 1036.0, 4000)
    end("short34", 1036.2, 5)
    assert "aborted" not in keeper.arrivals  # forgotten at a cut, though the frontend never idled
    keeper.close()
    periods = read_periods(tmp_path)
    assert len(periods) >= 3 and sum(p.requests for p in periods) == 36
    held = [p for p in periods if any(r.request_id == "long-stream" for r in p.longest)]
    assert len(held) == 1 and held[0].ended_at == 1036.0
    assert (held[0].longest[0].request_id, held[0].longest[0].seconds, held[0].longest[0].output_tokens) == (
        "long-stream", 36.0, 4000)
    assert held[0].started_at == 1000.0  # the period the stream ended in reaches back to its arrival


def test_the_report_gives_each_step_the_requests_that_held_it_in_the_json_csv_and_page(tmp_path):
    """Two measured steps of a rollout (the real recorder), each with a busy period of the frontend: the report's
    ``requests`` of each step are its own period's longest, longest first, the same in ``requests.csv`` and in
    the page's table (opened in headless Chromium, its cells read back against the JSON)."""
    from rlprof_plugins.config.options import parse_options
    from rlprof_plugins.metrics.recorder import recorder_for
    from rlprof_plugins.stages import IterationInfo
    from tests.helpers.browser import cells_match_json, open_page

    root = tmp_path / "root"
    recorder = recorder_for(str(root), "rank0", parse_options({}))
    keeper = LongestRequests(root, "frontend-1")
    for step, long_tokens in ((1, 300), (2, 500)):
        recorder.started(step)
        sent = time.time()
        for batch in [4] * 3 + [1] * 5:
            recorder.begin()
            time.sleep(0.002)
            recorder.end(IterationInfo(0, batch, batch))
        time.sleep(0.01)
        ended = time.time() - 0.009  # the responses ended before the step does, the longest last
        for k, tokens in enumerate([20, 30, long_tokens, 10]):
            finish(keeper, f"step{step}-{k}", sent, sent + 0.001, ended + tokens * 1e-5, tokens)
        keeper.idle()
    recorder.close()
    keeper.close()
    out = tmp_path / "report.json"
    assert rlprof(["report", str(root), "-q", "--json", str(out), "--csv", str(tmp_path / "csv")]) == 0
    data = json.loads(out.read_text())
    held = {s["global_step"]: [r["request_id"] for r in s["requests"]] for s in data["steps"]}
    assert held == {1: ["step1-2", "step1-1", "step1-0", "step1-3"], 2: ["step2-2", "step2-1", "step2-0", "step2-3"]}
    with open(tmp_path / "csv" / "requests.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["global_step"], r["place"], r["request_id"]) for r in rows][:2] == [("1", "1", "step1-2"),
                                                                                  ("1", "2", "step1-1")]
    assert len(rows) == 8 and rows[0]["output_tokens"] == "300"
    page = open_page(root / "report.html", tmp_path / "requests.png")
    assert page.console_errors == []
    request_cells = [c for c in page.cells if c["field"].startswith("requests.")]
    assert {c["field"] for c in request_cells} >= {"requests.0.request_id", "requests.0.seconds",
                                                   "requests.0.output_tokens"}
    assert {c["step"] for c in request_cells} == {2}  # the newest step's table
    assert cells_match_json(page, data) >= len(request_cells)


class Broken:
    """A keeper whose every call fails."""

    awaiting_first = {"x"}

    def __getattr__(self, name):
        raise RuntimeError("broken keeper")


def test_a_failing_keeper_never_reaches_the_engines_call_and_is_dropped(caplog):
    """Each wrapper runs the engine's method and returns its answer when rlprof's part fails; the keeper is
    dropped (one warning), so the frontend runs on as without rlprof."""
    import asyncio

    from rlprof_plugins.patches.sglang import request_times as sglang_times
    from rlprof_plugins.patches.vllm import request_times as vllm_times

    calls = []

    def engine_call(*args, **kwargs):
        calls.append(args)
        return "answer"

    processor = SimpleNamespace(request_states={})
    for wrapper, args in ((vllm_times._add_request, (SimpleNamespace(request_id="a", arrival_time=1.0),)),
                          (vllm_times._process_outputs, ([SimpleNamespace(request_id="a")],)),
                          (vllm_times._finish_request, (SimpleNamespace(request_id="a"),))):
        processor.__dict__[vllm_times.KEEPER_ATTR] = Broken()
        assert wrapper(engine_call, processor, args, {}) == "answer"
        assert vllm_times.KEEPER_ATTR not in processor.__dict__
    assert len(calls) == 3

    async def handled(*args, **kwargs):
        return "handled"

    manager = SimpleNamespace(rid_to_state={"a": SimpleNamespace(time_stats=None)})
    manager.__dict__[sglang_times.KEEPER_ATTR] = Broken()
    batch = SimpleNamespace(rids=["a"], finished_reasons=[{"type": "stop"}], prompt_tokens=[3])
    assert asyncio.run(sglang_times._handle_batch_output(handled, manager, (batch,), {})) == "handled"
    assert sglang_times.KEEPER_ATTR not in manager.__dict__
    assert sum("no longer followed" in r.getMessage() for r in caplog.records) <= 2  # once per engine


def test_summary_names_a_traced_steps_longest_requests_as_the_report_does(tmp_path, capsys):
    """A traced step (real vLLM TP=2 traces) that the step metrics measured and whose frontend wrote its busy
    period: ``summary --json`` holds the report's ``requests``, and its table names the longest in a line."""
    from rlprof_plugins.config.options import parse_options
    from rlprof_plugins.metrics.recorder import recorder_for
    from rlprof_plugins.stages import IterationInfo
    from tests.unit.test_fleet_report import FIXTURE, copy_step

    root = tmp_path / "root"
    copy_step(FIXTURE, root / "global_step_1", 1)
    recorder = recorder_for(str(root), "rank0", parse_options({}))
    keeper = LongestRequests(root, "frontend-1")
    recorder.started(1)
    sent = time.time()
    for batch in (2, 2, 1):
        recorder.begin()
        time.sleep(0.002)
        recorder.end(IterationInfo(0, batch, batch))
    finish(keeper, "short", sent, sent + 0.001, sent + 0.002, 3)
    finish(keeper, "long", sent, sent + 0.001, time.time(), 9)
    keeper.idle()
    time.sleep(0.01)
    recorder.close()
    keeper.close()
    assert rlprof(["report", str(root), "-q", "--json", str(tmp_path / "report.json")]) == 0
    (reported,) = json.loads((tmp_path / "report.json").read_text())["steps"]
    capsys.readouterr()
    assert rlprof(["summary", str(root), "--json", "-q"]) == 0
    (summarised,) = json.loads(capsys.readouterr().out)["steps"]
    assert summarised["requests"] == reported["requests"] and [r["request_id"] for r in reported["requests"]] == [
        "long", "short"]
    assert rlprof(["summary", str(root), "-q"]) == 0
    assert "step 1: the longest request" in capsys.readouterr().out
