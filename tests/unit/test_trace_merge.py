"""Merging, checking, splitting and summarising traces.

Inputs: real 2-rank traces recorded from the vLLM 0.32 CPU server (TP=2,
tests/fixtures/vllm-0.32-cpu-tp2, with their manifests) and CUDA-shaped
synthetic ranks (device pids, kernels, ac2g flows with the same ids in every
rank, different Kineto base times), since CPU runs record none of those.
"""

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlprof_plugins.cli.command import main as rlprof
from rlprof_plugins.store import step_files
from rlprof_plugins.trace.format import check
from rlprof_plugins.trace.rewrite import merge, stage_split
from rlprof_plugins.trace.format.reader import TraceFormatError, TraceReader
from tests.helpers.synthetic_traces import write_rank_trace
from tests.helpers.traces import iteration_details, merged_file

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-0.32-cpu-tp2"
BASE = 1_790_000_000_000_000_000


def load(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def real_step(tmp_path: Path, step: int) -> Path:
    target = tmp_path / f"global_step_{step}"
    shutil.copytree(FIXTURES / f"global_step_{step}", target)
    return target


def synthetic_step(tmp_path: Path, iterations: int = 16, shift_ns: int = 5_000_000) -> Path:
    d = tmp_path / "global_step_7"
    d.mkdir(parents=True)
    write_rank_trace(d / "rank0.100.pt.trace.json.gz", rank=0, iterations=iterations)
    write_rank_trace(d / "rank1.101.pt.trace.json.gz", rank=1, iterations=iterations, base_ns=BASE + shift_ns, slow=1.5)
    return d


def process_names(trace: dict) -> dict[int, str]:
    return {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
            if e.get("ph") == "M" and e.get("name") == "process_name"}


# ---- merge on real server traces ---------------------------------------------------
def test_real_tp2_step_merges_every_rank_and_the_frontend(tmp_path):
    d = real_step(tmp_path, 3)
    assert rlprof(["merge", str(d), "--quiet"]) == 0
    out = merged_file(d)
    report = check.check(out)
    assert report.ok, report.errors
    merged = load(out)
    names = process_names(merged)
    assert any(n.startswith("rank0 [tp0] CPU: VLLM::Worker_TP0") for n in names.values())
    assert any(n.startswith("rank1 [tp1] CPU: VLLM::Worker_TP1") for n in names.values())
    assert any(n.startswith("frontend CPU:") for n in names.values())
    ranks = merged["rlprof_merge"]["ranks"]
    assert [r["label"] for r in ranks] == ["rank0", "rank1", "frontend"]
    # every rank's recorded iterations are there, attributed to that rank's pids
    for r in ranks[:2]:
        pids = set(r["pids"])
        its = sorted(k for e in merged["traceEvents"] if e.get("pid") in pids
                     for k in [_iteration(e)] if k is not None)
        assert its == [0, 1, 2, 3, 4, 5], r["label"]
    # nothing of the sources was lost: each rank's non-renamed events are all there
    for r in ranks:
        src = load(next(d.rglob(r["source"])))
        kept = [e for e in src["traceEvents"] if e.get("name") not in ("process_name", "process_sort_index")]
        assert len([e for e in merged["traceEvents"] if e.get("pid") in set(r["pids"])
                    and e.get("name") not in ("process_name", "process_sort_index")]) == len(kept)


def _iteration(e):
    details = iteration_details({"traceEvents": [e]})
    return next(iter(details), None)


def test_real_by_stage_step_merges_per_stage(tmp_path):
    d = real_step(tmp_path, 4)
    assert rlprof(["merge", str(d), "--quiet"]) == 0
    for stage, expected in (("prefill", [0, 1]), ("decode", [2, 3, 4, 5, 6, 7, 8, 9])):
        out = merged_file(d, stage)
        assert check.check(out).ok
        merged = load(out)
        assert merged["rlprof_merge"]["stage"] == stage
        for r in merged["rlprof_merge"]["ranks"]:
            pids = set(r["pids"])
            its = iteration_details({"traceEvents": [e for e in merged["traceEvents"] if e.get("pid") in pids]})
            assert sorted(its) == expected, (stage, r["label"])


def test_native_folder_without_manifest_is_recognised(tmp_path):
    d = real_step(tmp_path, 3)
    (d / "manifest.json").unlink()
    (d / "notes.trace.json.gz").write_bytes(b"")  # matches no engine's naming
    plan = step_files.plan(d)
    (group,) = plan.groups
    assert [f.label for f in group.inputs] == ["rank0", "rank1", "frontend"]
    assert [u.path.name for u in plan.unplaced] == ["notes.trace.json.gz"]


def test_a_by_stage_sessions_frontend_trace_is_unplaced_as_the_frontends_and_the_summary_leaves_it_out(tmp_path):
    """The API server's trace is not split by stage: a by-stage session leaves it out of every merge, saying it is
    the frontend's, and the summary (which reads worker traces only) does not list it as unplaced."""
    from rlprof_plugins.report.render.summary import summarise

    d = real_step(tmp_path, 3)
    data = json.loads((d / "manifest.json").read_text())
    for f in data["files"]:
        if f["role"] == "worker":
            f["stage"] = "decode"
    (d / "manifest.json").write_text(json.dumps(data))
    plan = step_files.plan(d)
    assert [(g.stage, [f.label for f in g.inputs]) for g in plan.groups] == [("decode", ["rank0", "rank1"])]
    (frontend,) = plan.unplaced
    assert frontend.role == "frontend" and frontend.path.parent.name == "frontend", frontend
    assert "not split by stage" in frontend.reason
    (d / "ranks" / "notes.trace.json.gz").write_bytes(b"")  # a worker's file no merge takes: the summary names it
    data["files"].append({"kind": "trace", "path": "ranks/notes.trace.json.gz", "rank": "rank0", "role": "worker",
                          "stage": "decode"})
    (d / "manifest.json").write_text(json.dumps(data))
    assert [u["path"] for u in summarise(tmp_path)["unplaced"]] == [str(d / "ranks" / "notes.trace.json.gz")]


def test_sglang_naming_is_recognised(tmp_path):
    for name in ("p-abc-TP-1-EXTEND.trace.json.gz", "p-abc-TP-0-EXTEND.trace.json.gz",
                 "p-abc-TP-0-DECODE.trace.json.gz", "p-abc-TP-1-DECODE.trace.json.gz",
                 "merged-abc.trace.json.gz"):
        (tmp_path / name).write_bytes(b"")
    plan = step_files.plan(tmp_path)
    assert [(g.stage, [f.label for f in g.inputs]) for g in plan.groups] == [
        ("decode", ["TP-0", "TP-1"]), ("prefill", ["TP-0", "TP-1"])]
    assert [g.output.name for g in plan.groups] == ["merged.decode.pt.trace.json.gz", "merged.prefill.pt.trace.json.gz"]
    assert plan.unplaced == []


def test_rlprof_sglang_naming_is_recognised_without_a_manifest(tmp_path):
    """What the SGLang plugin writes (``[prefix-]TP-<t>.<ns>[.stage].pt.trace.json.gz``)."""
    for name in ("rollout-TP-1.17.prefill.pt.trace.json.gz", "rollout-TP-0.16.prefill.pt.trace.json.gz",
                 "rollout-TP-0.16.decode.pt.trace.json.gz", "rollout-TP-1.17.decode.pt.trace.json.gz"):
        (tmp_path / name).write_bytes(b"")
    plan = step_files.plan(tmp_path)
    assert [(g.stage, [f.label for f in g.inputs]) for g in plan.groups] == [
        ("decode", ["TP-0", "TP-1"]), ("prefill", ["TP-0", "TP-1"])]
    (tmp_path / "extra").mkdir()
    for name in ("TP-0-PP-1.5.pt.trace.json.gz", "TP-0.4.pt.trace.json.gz"):
        (tmp_path / "extra" / name).write_bytes(b"")
    (group,) = step_files.plan(tmp_path / "extra").groups
    assert [f.label for f in group.inputs] == ["TP-0", "TP-0-PP-1"] and group.output.name == "merged.pt.trace.json.gz"


# ---- merge rules on CUDA-shaped ranks ------------------------------------------------
def test_pids_ids_and_clocks_are_made_rank_safe(tmp_path):
    d = synthetic_step(tmp_path)
    (group,) = step_files.plan(d).groups
    result = merge.merge(group)
    merged = load(result.output)
    assert check.check(result.output).ok
    names = process_names(merged)
    assert sorted(names.values()) == ["rank0 CPU: python (pid 4242)", "rank0 device: GPU 0",
                                      "rank1 CPU: python (pid 4242)", "rank1 device: GPU 0"]
    order = {e["pid"]: e["args"]["sort_index"] for e in merged["traceEvents"] if e.get("name") == "process_sort_index"}
    by_name = {v: order[k] for k, v in names.items()}
    assert by_name["rank0 CPU: python (pid 4242)"] < by_name["rank0 device: GPU 0"] < by_name["rank1 CPU: python (pid 4242)"]
    flows = [e for e in merged["traceEvents"] if e.get("ph") in ("s", "f")]
    ids_by_rank = {}
    for e in flows:
        ids_by_rank.setdefault(names[e["pid"]].split()[0], set()).add(e["id"])
    assert not ids_by_rank["rank0"] & ids_by_rank["rank1"]
    # correlation args move with the flow ids
    kernels = [e for e in merged["traceEvents"] if e.get("cat") == "kernel"]
    flow_ids = {e["id"] for e in flows}
    assert all(k["args"]["correlation"] in flow_ids for k in kernels)
    # rank1's clock is 5 ms later: its first iteration moves by 5000 us
    first = {}
    for e in merged["traceEvents"]:
        if e.get("cat") == "user_annotation":
            first.setdefault(names[e["pid"]].split()[0], e["ts"])
    assert first["rank1"] - first["rank0"] == pytest.approx(5000.0)
    assert merged["baseTimeNanoseconds"] == BASE
    meta = merged["rlprof_merge"]["ranks"]
    assert [m["distributedInfo"]["rank"] for m in meta] == [0, 1]
    assert [d["rlprof_rank"] for d in merged["deviceProperties"]] == ["rank0", "rank1"]


def test_checker_catches_a_naive_concatenation(tmp_path):
    """What SGLang's merger writes: pids relabelled, flow ids untouched."""
    d = synthetic_step(tmp_path)
    events = []
    for k, name in enumerate(sorted(d.glob("rank*.gz"))):
        for e in load(name)["traceEvents"]:
            e["pid"] = f"[TP{k:02d}] {e['pid']}"
            events.append(e)
    ranks = [{"label": f"TP{k}", "pids": sorted({e["pid"] for e in events if e["pid"].startswith(f"[TP{k:02d}]")})}
             for k in range(2)]
    bad = tmp_path / "naive.json"
    bad.write_text(json.dumps({"traceEvents": events, "rlprof_merge": {"ranks": ranks}}))
    report = check.check(bad)
    assert not report.ok
    assert any("joins ranks" in m for m in report.errors)


@pytest.mark.parametrize("event, message", [
    ({"ph": "Q", "name": "x", "pid": 1, "tid": 1, "ts": 0}, "unknown ph"),
    ({"ph": "X", "name": "x", "pid": 1, "tid": 1, "ts": 0}, "without a finite dur"),
    ({"ph": "X", "name": "x", "pid": 1, "tid": 1, "dur": 1}, "ts missing"),
    ({"ph": "E", "name": "x", "pid": 1, "tid": 1, "ts": 0}, "no open B"),
    ({"ph": "X", "name": "x", "tid": 1, "ts": 0, "dur": 1}, "pid missing"),
    ({"ph": "M", "name": "process_sort_index", "pid": 1, "args": {"sort_index": "a"}}, "integer args.sort_index"),
])
def test_checker_names_each_rule(tmp_path, event, message):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [event]}))
    report = check.check(path)
    assert not report.ok and any(message in m for m in report.errors), report.errors


def test_truncated_input_fails_naming_the_file_and_leaves_nothing(tmp_path, capsys):
    d = synthetic_step(tmp_path)
    victim = d / "rank1.101.pt.trace.json.gz"
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])
    assert rlprof(["merge", str(d), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "rank1.101.pt.trace.json.gz" in err and ("truncated" in err or "corrupt" in err)
    assert sorted(p.name for p in d.iterdir()) == ["rank0.100.pt.trace.json.gz", "rank1.101.pt.trace.json.gz"]


def test_missing_path_and_usage_errors(tmp_path, capsys):
    assert rlprof(["merge", str(tmp_path / "nope")]) == 1
    assert "nope: no such file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        rlprof(["merge"])
    assert e.value.code == 2


# Merges one step in a fresh interpreter and prints its peak of traced Python
# memory: threads other tests left running in this process would allocate
# while tracemalloc counts.
MERGE_PEAK = """
import sys, tracemalloc
from pathlib import Path
from rlprof_plugins.store import step_files
from rlprof_plugins.trace.rewrite import merge
(group,) = step_files.plan(Path(sys.argv[1])).groups
tracemalloc.start()
merge.merge(group, jobs=1)
print(tracemalloc.get_traced_memory()[1])
"""


def test_memory_does_not_grow_with_trace_size(tmp_path):
    """Peak Python memory while merging 4x more events stays about the same
    (both inputs well past the reader's buffer)."""
    peaks = []
    for n, sub in ((3000, "small"), (12000, "large")):
        step = synthetic_step(tmp_path / sub, iterations=n)
        run = subprocess.run([sys.executable, "-c", MERGE_PEAK, str(step)], capture_output=True,
                             text=True, timeout=300, cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        peaks.append(int(run.stdout.split()[-1]))
    size = [merged_file(tmp_path / s / "global_step_7").stat().st_size for s in ("small", "large")]
    assert size[1] > 3 * size[0]
    assert peaks[1] < 1.3 * peaks[0], peaks


def test_reader_accepts_any_layout(tmp_path):
    events = [{"ph": "X", "name": f"e{k}", "pid": 1, "tid": 1, "ts": k, "dur": 1} for k in range(5)]
    compact = tmp_path / "a.json"
    compact.write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}, separators=(",", ":")))
    bare = tmp_path / "b.json"
    bare.write_text(json.dumps(events, indent=4))
    for path in (compact, bare):
        with TraceReader(path) as r:
            assert [e["name"] for e in r.events()] == [f"e{k}" for k in range(5)]
    with TraceReader(compact) as r:
        list(r.events())
        assert r.trailer == {"displayTimeUnit": "ms"}
    (tmp_path / "c.json").write_text('{"traceEvents": [{"ph": "X",, }]}')
    with pytest.raises(TraceFormatError, match="c.json"):
        with TraceReader(tmp_path / "c.json") as r:
            list(r.events())


# ---- offline stage split and summary --------------------------------------------------
def test_split_stages_of_a_real_whole_trace_matches_the_live_rule(tmp_path):
    d = real_step(tmp_path, 3)
    (rank0,) = d.rglob("rank0.*.pt.trace.json.gz")
    assert rlprof(["split-stages", str(rank0), "-o", str(tmp_path / "out"), "--quiet"]) == 0
    parts = {s: load(next((tmp_path / "out").glob(f"*.{s}.pt.trace.json.gz"))) for s in ("prefill", "decode")}
    stages = {s: iteration_details(t) for s, t in parts.items()}
    whole = iteration_details(load(rank0))
    assert sorted(stages["prefill"]) + sorted(stages["decode"]) == sorted(whole) == [0, 1, 2, 3, 4, 5]
    assert stages["decode"] and all(d[1] == 0 for d in stages["decode"].values())  # no prompt tokens
    for s, its in stages.items():
        assert all(d[0] == s for d in its.values()), (s, its)
        assert check.check(next((tmp_path / "out").glob(f"*.{s}.pt.trace.json.gz"))).ok


def test_split_of_a_trace_without_annotations_fails_cleanly(tmp_path, capsys):
    path = tmp_path / "plain.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 0, "dur": 1}]}))
    assert rlprof(["split-stages", str(path), "--quiet"]) == 1
    assert "no rlprof iteration annotations" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["plain.json"]


def test_split_file_streams_and_matches_the_in_memory_rule(tmp_path):
    path = write_rank_trace(tmp_path / "rank0.1.pt.trace.json.gz", rank=0, iterations=24)
    written = dict(stage_split.split_file(path, tmp_path / "out", "rank0.1"))
    expected = stage_split.split(load(path))
    for s in ("prefill", "decode"):
        got = sorted(json.dumps(e, sort_keys=True) for e in load(written[s])["traceEvents"])
        assert got == sorted(json.dumps(e, sort_keys=True) for e in expected[s]["traceEvents"])
        assert check.check(written[s]).ok


def test_split_file_places_device_events_read_before_their_launch(tmp_path):
    """Kineto writes device activity after the host's; a file with kernels and flow
    ends first still splits as the in-memory rule does (the deferred pass)."""
    path = write_rank_trace(tmp_path / "rank0.1.pt.trace.json.gz", rank=0, iterations=24)
    trace = load(path)
    late = [e for e in trace["traceEvents"] if stage_split._is_late(e)]
    assert late
    trace["traceEvents"] = late + [e for e in trace["traceEvents"] if not stage_split._is_late(e)]
    reordered = tmp_path / "reordered.pt.trace.json.gz"
    reordered.write_bytes(gzip.compress(json.dumps(trace).encode()))
    written = dict(stage_split.split_file(reordered, tmp_path / "out", "reordered"))
    expected = stage_split.split(trace)
    for s in ("prefill", "decode"):
        got = sorted(json.dumps(e, sort_keys=True) for e in load(written[s])["traceEvents"])
        assert got == sorted(json.dumps(e, sort_keys=True) for e in expected[s]["traceEvents"])
        assert any(e.get("cat") == "kernel" for e in load(written[s])["traceEvents"])


def test_summary_per_step_stage_rank_with_imbalance_and_change(tmp_path, capsys):
    root = tmp_path / "traces"
    for step, its in ((1, 16), (2, 32)):
        d = root / f"global_step_{step}"
        d.mkdir(parents=True)
        write_rank_trace(d / "rank0.1.prefill.pt.trace.json.gz", rank=0, iterations=its, prefill_every=1)
        write_rank_trace(d / "rank1.1.prefill.pt.trace.json.gz", rank=1, iterations=its, prefill_every=1, slow=1.5)
    assert rlprof(["summary", str(root), "--json", "--quiet"]) == 0
    data = json.loads(capsys.readouterr().out)
    (s1,), (s2,) = [step["stages"] for step in data["steps"]]
    assert [step["global_step"] for step in data["steps"]] == [1, 2]
    assert s1["stage"] == "prefill" and s1["iterations"] == 16
    # 16 iterations x 400 us, rank1 1.5x slower: each iteration is its slowest rank's
    assert s1["total_ms"] == pytest.approx(16 * 0.4 * 1.5) and s1["imbalance"] == pytest.approx(1.5)
    assert s1["mean_ms"] == pytest.approx(0.4 * 1.5) and s2["total_ms"] == pytest.approx(2 * s1["total_ms"])
    assert s2["change_pct"] == 0.0  # twice the iterations, each as long: no change per iteration
    assert s1["top_device_ops"][0]["name"] == "flash_prefill_kernel"
    # self time: aten::linear minus its nested aten::addmm, per iteration the same in both steps
    cpu = {op["name"]: op["ms"] for op in s1["top_cpu_ops"]}
    assert cpu["aten::linear"] == pytest.approx(cpu["aten::addmm"] * (0.5 - 0.3) / 0.3, rel=1e-3)
    per = [{op["name"]: op["per_iteration_ms"] for op in s["top_cpu_ops"]} for s in (s1, s2)]
    assert per[0] == pytest.approx(per[1], rel=1e-3) and per[0]["aten::addmm"] > 0
    assert rlprof(["summary", str(root), "--quiet"]) == 0
    table = capsys.readouterr().out
    assert "flash_prefill_kernel" in table and "+0.0%" in table and "1.50x" in table


def test_summary_of_real_steps(tmp_path, capsys):
    real_step(tmp_path, 3)
    real_step(tmp_path, 4)
    assert rlprof(["summary", str(tmp_path), "--json", "--quiet"]) == 0
    data = json.loads(capsys.readouterr().out)
    got = {(s["global_step"], st["stage"]): (st["iterations"], len(st["ranks"])) for s in data["steps"]
           for st in s["stages"]}
    assert got == {(3, "decode"): (4, 2), (3, "prefill"): (2, 2), (4, "decode"): (8, 2), (4, "prefill"): (2, 2)}
