"""The step report tells the truth (issue 45): changes per iteration, one definition with ``summary``,
traces the engines wrote themselves, honest edge cases, a thousand steps.

Inputs are real: sessions recorded here through the controller with torch's
profiler, the vLLM 0.32 TP=2 fixture recorded with rlprof, and the traces
vLLM 0.32 and SGLang 0.5.23 (TP=2) wrote with their own profilers
(``tests/tools/record_fixtures.py``). Expected numbers are parsed from the
events independently of rlprof's reader.
"""

import gzip
import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from rlprof_plugins.cli.command import main as rlprof
from rlprof_plugins.report.plan.state_store import CACHE_DIR
from tests.helpers.browser import cells_match_json, open_page
from tests.helpers.hta import hta
from tests.helpers.traces import load_trace
from tests.unit.test_report_steps import FIXTURE
from tests.unit.test_session import DECODE, make_controller, settle, start

FIXTURES = FIXTURE.parent
NATIVE = {"vllm": (FIXTURES / "vllm-0.32-cpu-tp2-native", re.compile(r"^execute_context_(\d+)\(")),
          "sglang": (FIXTURES / "sglang-0.5.23-cpu-tp2-native", re.compile(r"^step\[(EXTEND|DECODE) "))}


def report(root: Path, *args: str) -> tuple[int, dict]:
    out = root.parent / f"{root.name}-report.json"
    code = rlprof(["report", str(root), "-q", "--json", str(out), *args])
    return code, json.loads(out.read_text()) if out.exists() else {}


def summary(root: Path, capsys) -> tuple[int, dict]:
    capsys.readouterr()
    code = rlprof(["summary", str(root), "--json", "--quiet"])
    out = capsys.readouterr().out
    return code, json.loads(out) if code == 0 else {}


def decode_traffic(ctl, n: int) -> None:
    """The same decode iteration ``n`` times, on one thread: operators of tens of microseconds, so
    that their time per iteration is steady from session to session."""
    x = torch.ones(48, 48)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(n):
            ctl.begin_iteration(DECODE)
            for _ in range(8):
                x = torch.relu(x @ x / 48)
            torch.add(x, 1)
            ctl.end_iteration()
    finally:
        torch.set_num_threads(threads)


def decode_steps(root: Path, windows: dict[int, int]) -> Path:
    """Sessions of the same decode traffic through the real controller: global step -> iterations recorded."""
    for step, n in windows.items():
        ctl = make_controller(root)
        assert start(ctl, global_step=step, step_end=n)["ok"]
        decode_traffic(ctl, n)
        assert settle(ctl, step)["state"] == "done"
        ctl.shutdown()
    return root


def decode_self_ms(step_dir: Path) -> dict[str, float]:
    """Each CPU operator's self time (ms) over the step's iterations, parsed from its trace's events:
    its duration less its nested operators', per thread, counted where it starts inside one of
    rlprof's iteration ranges."""
    (trace,) = step_dir.rglob("rank0*.pt.trace.json.gz")
    events = [e for e in load_trace(trace)["traceEvents"] if e.get("ph") == "X"]
    windows = [(e["ts"], e["ts"] + e["dur"]) for e in events
               if e.get("cat") == "user_annotation" and str(e.get("name")).startswith("rlprof::iteration ")]
    self_us: dict[str, float] = {}
    by_thread: dict = {}
    for e in events:
        if e.get("cat") == "cpu_op":
            by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    for ops in by_thread.values():
        open_ops: list[list] = []  # [end, name, own duration, nested duration, start]

        def close(op: list) -> None:
            end, name, own, nested, start = op
            if any(lo <= start < hi for lo, hi in windows):
                self_us[name] = self_us.get(name, 0.0) + max(0.0, own - nested)
        for e in sorted(ops, key=lambda e: (e["ts"], -e["dur"])):
            while open_ops and open_ops[-1][0] <= e["ts"]:
                close(open_ops.pop())
            if open_ops:
                open_ops[-1][3] += e["dur"]
            open_ops.append([e["ts"] + e["dur"], e["name"], e["dur"], 0.0, e["ts"]])
        while open_ops:
            close(open_ops.pop())
    return {name: us / 1000.0 for name, us in self_us.items()}


def per_iteration(ms: float, iterations: int) -> float:
    return round(ms / iterations, 4)


def test_operator_changes_are_per_iteration_not_totals(tmp_path):
    """Step 2 records twice the iterations of step 1, the same decode traffic: each operator's change
    is its time per iteration against step 1's (totals would read about +100% everywhere), shown with
    both iteration counts, on step 2's row and in ``--compare``. The figures are checked against the
    traces' events, not against how steady this machine's timings are."""
    root = decode_steps(tmp_path / "root", {0: 4, 1: 40, 2: 80})  # step 0: the first calls' warm-up
    code, data = report(root, "--steps", "1-2", "--compare", "1", "2")
    assert code == 0
    step1, step2 = data["steps"]
    assert (step1["stages"]["decode"]["iterations"], step2["stages"]["decode"]["iterations"]) == (40, 80)
    before, now = decode_self_ms(root / "global_step_1"), decode_self_ms(root / "global_step_2")
    assert set(before) == set(now) and {"aten::mm", "aten::relu", "aten::add"} <= set(now), (before, now)

    ops = [o for o in step2["operators"]["cpu"] if o["stage"] == "decode"]
    compared = [o for o in data["compare"]["operators"]["cpu"] if o["stage"] == "decode"]
    assert {o["name"] for o in ops} == {o["name"] for o in compared} == set(now)
    for o in ops:
        assert (o["iterations"], o["before_iterations"], o["status"]) == (80, 40, None), o
        assert abs(o["ms"] - now[o["name"]]) <= 0.002 and abs(o["before_ms"] - before[o["name"]]) <= 0.002, o
        per_now, per_before = per_iteration(o["ms"], 80), per_iteration(o["before_ms"], 40)
        assert (o["per_iteration_ms"], o["before_per_iteration_ms"]) == (per_now, per_before), o
        # per iteration: the totals' change would read about +100% here
        assert o["change_pct"] == round(100.0 * (per_now - per_before) / per_before, 1), o
    row = {o["name"]: o for o in ops}
    for o in compared:
        r = row[o["name"]]
        assert (o["a_iterations"], o["b_iterations"], o["status"]) == (40, 80, None), o
        assert (o["a_ms"], o["b_ms"], o["a_per_iteration_ms"], o["b_per_iteration_ms"], o["change_pct"]) == \
            (r["before_ms"], r["ms"], r["before_per_iteration_ms"], r["per_iteration_ms"], r["change_pct"]), o
        assert o["change_per_iteration_ms"] == round(r["per_iteration_ms"] - r["before_per_iteration_ms"], 4), o


def test_new_and_gone_operators_are_marked(tmp_path):
    root = decode_steps(tmp_path / "root", {1: 4, 2: 4})
    trace = next((root / "global_step_2").rglob("rank0*.pt.trace.json.gz"))
    data = load_trace(trace)
    for e in data["traceEvents"]:
        if e.get("name") == "aten::add":
            e["name"] = "aten::brand_new"
    trace.write_bytes(gzip.compress(json.dumps(data).encode()))
    code, out = report(root, "--compare", "1", "2", "--no-cache")
    ops = {(o["name"], o["status"]) for o in out["steps"][1]["operators"]["cpu"]}
    assert {("aten::brand_new", "new"), ("aten::add", "gone")} <= ops, ops
    compared = {(o["name"], o["status"]) for o in out["compare"]["operators"]["cpu"]}
    assert {("aten::brand_new", "new"), ("aten::add", "gone")} <= compared


def agreeing(summary_json: dict, report_json: dict) -> list[tuple]:
    """The (step, stage) pairs of both commands' JSON, asserting their numbers are the same."""
    from_summary = {(step["global_step"], st["stage"]): [st[k] for k in ("iterations", "mean_ms", "p90_ms",
                                                                          "total_ms", "change_pct")]
                    for step in summary_json["steps"] for st in step["stages"]}
    from_report = {(row["global_step"], stage): [n["iterations"], n["mean_ms"], n["p90_ms"], n["total_ms"],
                                                 row["change_pct"][stage]]
                   for row in report_json["steps"] for stage, n in row["stages"].items()}
    assert from_summary == from_report and from_summary, (from_summary, from_report)
    return sorted(from_report)


def test_summary_and_report_agree_on_the_fixture_and_a_recorded_root(tmp_path, capsys):
    stages = {}
    for root in (_copy(FIXTURE, tmp_path / "fixture"), decode_steps(tmp_path / "root", {1: 3, 2: 6})):
        code_s, s = summary(root, capsys)
        code_r, r = report(root)
        assert code_s == code_r == 0
        stages[root.name] = agreeing(s, r)
    # the fixture's step 3 was recorded without by-stage files: its iterations say their stage all the same
    assert stages["fixture"] == [(3, "decode"), (3, "prefill"), (4, "decode"), (4, "prefill")]
    assert stages["root"] == [(1, "decode"), (2, "decode")]


@pytest.mark.parametrize("engine", sorted(NATIVE))
def test_traces_the_engines_wrote_themselves_give_prefill_and_decode(engine, tmp_path, capsys):
    folder, pattern = NATIVE[engine]
    expected: dict[str, dict[str, int]] = {}  # rank file -> stage -> count, from the events
    for path in sorted(folder.glob("*.json.gz")):
        names = [str(e.get("name")) for e in load_trace(path)["traceEvents"] if e.get("ph") == "X"
                 and e.get("cat") == "user_annotation"]
        found = [m[1] for n in names if (m := pattern.match(n))]
        if found:
            expected[path.name] = {"prefill": sum(1 for f in found if f not in ("0", "DECODE")),
                                   "decode": sum(1 for f in found if f in ("0", "DECODE"))}
    assert len(expected) == 2 and all(c["prefill"] and c["decode"] for c in expected.values()), expected
    root = _copy(folder, tmp_path / engine)
    code, data = report(root)
    assert code == 0, data.get("notes")
    (row,) = data["steps"]
    assert row["sources"] == [engine] and len(row["ranks"]) == 2
    for stage in ("prefill", "decode"):
        assert row["stages"][stage]["iterations"] == max(c[stage] for c in expected.values())
    page = (root / "report.html").read_text()
    assert {"vllm": "vLLM&#x27;s execute_context_*", "sglang": "SGLang&#x27;s step[...]"}[engine] in page
    # no step named: the folder's name, never None
    assert (f"<td data-field=global_step data-value='null'><a href='#step-traces'>{engine}</a></td>" in page
            and "step-None" not in page and f"traces in {engine} (no global step)" in page)
    code_s, s = summary(root, capsys)
    assert code_s == 0 and {st["stage"] for st in s["steps"][0]["stages"]} == {"prefill", "decode"}


def test_a_trace_with_no_iteration_annotation_is_named_not_an_empty_success(tmp_path, capsys):
    root = _copy(NATIVE["vllm"][0], tmp_path / "plain")
    for path in root.glob("rank*.json.gz"):
        data = load_trace(path)
        for e in data["traceEvents"]:
            if str(e.get("name", "")).startswith("execute_"):
                e["name"] = "some_range"
        path.write_bytes(gzip.compress(json.dumps(data).encode()))
    code, data = report(root)
    assert code == 1 and data["steps"][0]["iterations"] == 0
    assert any("no engine iteration in rank0." in note and "ProfilerStep#N" in note for note in data["notes"])
    assert rlprof(["summary", str(root), "--quiet"]) == 1
    assert "no engine iteration found in rank0." in capsys.readouterr().err


def test_an_empty_root_reports_no_step_exits_1_and_writes_nothing(tmp_path, capsys):
    root = tmp_path / "empty"
    root.mkdir()
    assert rlprof(["report", str(root), "-q"]) == 1
    assert "nothing to report" in capsys.readouterr().err
    assert sorted(p.name for p in root.iterdir()) == []  # no page, no cache


def test_a_truncated_rank_keeps_the_other_rank_and_names_the_file(tmp_path):
    root = _copy(FIXTURE, tmp_path / "root")
    broken = next((root / "global_step_3").rglob("rank0.*.gz"))
    broken.write_bytes(gzip.compress(gzip.decompress(broken.read_bytes())[:5000]))  # cut mid-way
    code, data = report(root)
    assert code == 1
    step3 = data["steps"][0]
    assert step3["ranks"] == ["rank1"] and step3["stages"]["decode"]["iterations"] == 4
    assert len(step3["unreadable"]) == 1 and step3["unreadable"][0].startswith(broken.name)
    assert any(note.startswith("unreadable: step 3: " + broken.name) and "kept: rank1" in note
               for note in data["notes"])
    row = (root / "report.html").read_text().split("<tr data-step='3'>")[1].split("</tr>")[0]
    assert "1 file(s) unreadable: " + broken.name in row


@pytest.mark.parametrize("args", [["--compare", "4", "4"], ["--steps", "5-3"], ["--steps", "x"],
                                  ["--steps", "4", "--compare", "3", "4"]])
def test_arguments_that_cannot_go_together_exit_2(args, tmp_path, capsys):
    root = _copy(FIXTURE, tmp_path / "root")
    assert rlprof(["report", str(root), "-q", *args]) == 2
    assert "rlprof report: error: --" in capsys.readouterr().err
    assert not (root / "report.html").exists() and not (root / CACHE_DIR).exists()


def write_tiny_step(root: Path, step: int, ms: float) -> None:
    """A one-rank step of 3 decode iterations of ``ms`` each, one operator inside each."""
    folder = root / f"global_step_{step}"
    folder.mkdir(parents=True)
    events = []
    for k in range(3):
        ts = 1000.0 + k * ms * 2000
        events += [{"ph": "X", "cat": "user_annotation", "name": f"rlprof::iteration {k} [decode] prefill_tokens=0 "
                    "decode_tokens=4 batch=4", "ts": ts, "dur": ms * 1000, "pid": 1, "tid": 1},
                   {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": ts + 1, "dur": ms * 500, "pid": 1, "tid": 1}]
    (folder / f"rank0.{1795366444000000000 + step}.pt.trace.json.gz").write_bytes(
        gzip.compress(json.dumps({"traceEvents": events}).encode(), compresslevel=1))


def test_a_thousand_steps_make_a_small_usable_page(tmp_path):
    root = tmp_path / "root"
    for step in range(1, 1001):
        write_tiny_step(root, step, 400.0 if step == 1 else 1.0 + (step % 7) / 10)  # a warm-up outlier
    code, data = report(root)
    assert code == 0 and len(data["steps"]) == 1000
    page = root / "report.html"
    assert page.stat().st_size <= 5 * 1024 * 1024
    opened = open_page(page, tmp_path / "thousand.png", height=1200)
    assert not opened.console_errors and not opened.blocked
    assert cells_match_json(opened, data) > 1000 * 5
    html = page.read_text()
    assert html.count("data-above") == 1  # the warm-up step sits on the top edge, named
    assert "<details id='step-1000' data-step='1000' open>" in html and "id='step-900'" not in html
    assert "data-older><summary>The 940 older steps" in html and "href='global_step_1000'" in html


def _copy(folder: Path, to: Path) -> Path:
    shutil.copytree(folder, to)
    return to


def test_holistic_trace_analysis_finds_the_fixtures_iterations(tmp_path):
    """The fixtures are recorded with ``ProfilerStep#N`` inside each iteration: HTA, the analysis tool
    users already have, finds step 3's iterations on both ranks and places operators in each (all but the
    last: HTA ends an iteration where the next begins, here as on the live server's traces)."""
    folder = tmp_path / "ranks"
    shutil.copytree(FIXTURE / "global_step_3" / "ranks", folder)
    found = hta(folder, "iterations")
    assert found["ranks"] == [0, 1] and found["iterations"] == [0, 1, 2, 3, 4], found
    assert set(found["events_per_iteration"]) == {str(k) for k in range(5)}
    assert all(n > 10 for n in found["events_per_iteration"].values())
