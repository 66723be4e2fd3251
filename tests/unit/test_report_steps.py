"""The step report's numbers (``report.render.steps``): one row per global
step, read from real traces (the vLLM 0.32 TP=2 fixture: a plain step and a
by-stage one; sessions recorded here through the controller), checked
against the events parsed independently."""

import gzip
import json
import shutil
from pathlib import Path

from rlprof_plugins.report.render.build import build_here
from rlprof_plugins.report.render.steps import flat_rows
from rlprof_plugins.stages import ITERATION_RE
from tests.helpers.kineto_gpu import write_gpu_rank
from tests.helpers.traces import load_trace
from tests.unit.test_chunks import record

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-0.32-cpu-tp2"


def step_rows(root: Path) -> dict:
    """The report's rows of one server's root, read here without a cache (``rlprof report --no-cache``)."""
    return build_here(root, use_cache=False).report


def slowest_of(step: Path) -> dict[int, tuple[str, float, str]]:
    """Each iteration's (stage, ms, rank) of its slowest rank: straight from the events."""
    slowest: dict[int, tuple[str, float, str]] = {}
    for path in step.rglob("rank*.pt.trace.json.gz"):
        for e in load_trace(path)["traceEvents"]:
            m = ITERATION_RE.match(str(e.get("name", ""))) if e.get("ph") == "X" else None
            if m and e["dur"] / 1000 > slowest.get(int(m["index"]), ("", -1.0, ""))[1]:
                slowest[int(m["index"])] = (m["stage"], e["dur"] / 1000, path.name.split(".")[0])
    return slowest


def slowest_by_stage(step: Path) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for stage, ms, _ in slowest_of(step).values():
        out.setdefault(stage, []).append(ms)
    return out


def test_one_row_per_step_with_the_slowest_rank_per_iteration_by_stage():
    report = step_rows(FIXTURE)
    assert [r["global_step"] for r in report["steps"]] == [3, 4]
    for row in report["steps"]:
        expected = slowest_by_stage(Path(row["directory"]))
        assert (row["state"], row["engine"], row["engine_version"], row["error"]) == ("done", "vllm", "0.32.0", None)
        assert row["ranks"] == ["rank0", "rank1"] and not row["missing_ranks"]
        assert set(row["stages"]) == set(expected) and row["iterations"] == sum(map(len, expected.values()))
        for stage, ms in expected.items():
            numbers = row["stages"][stage]
            assert numbers["iterations"] == len(ms)
            assert abs(numbers["mean_ms"] - sum(ms) / len(ms)) < 0.002 and numbers["p90_ms"] <= max(ms) + 0.001
        assert row["trace_bytes"] > 0 and row["span_ms"] >= max(max(ms) for ms in expected.values())
        ranks = [rank for _, _, rank in slowest_of(Path(row["directory"])).values()]
        assert row["slowest_rank_iterations"] == {r: ranks.count(r) for r in ("rank0", "rank1")}
        assert set(row["rank_busy_ms"]) == {"rank0", "rank1"} and all(v > 0 for v in row["rank_busy_ms"].values())
    step3, step4 = report["steps"]
    assert step4["by_stage"] and set(step4["stages"]) == {"prefill", "decode"}
    change = step4["change_pct"]["decode"]
    assert change == round(100 * (step4["stages"]["decode"]["mean_ms"] - step3["stages"]["decode"]["mean_ms"])
                           / step3["stages"]["decode"]["mean_ms"], 1)
    assert step3["change_pct"] == {"decode": None, "prefill": None}  # no earlier step
    flat = flat_rows(report)
    assert [(f["global_step"], f["stage"]) for f in flat] == [(3, "decode"), (3, "prefill"), (4, "decode"),
                                                              (4, "prefill")]


def test_a_step_it_cannot_read_or_that_failed_keeps_its_row_saying_why(tmp_path):
    root = tmp_path / "root"
    shutil.copytree(FIXTURE, root)
    broken = next((root / "global_step_3").rglob("rank0.*.gz"))
    broken.write_bytes(gzip.compress(gzip.decompress(broken.read_bytes())[:5000]))  # cut mid-way
    data = json.loads((root / "global_step_4" / "manifest.json").read_text())
    data["state"] = "failed"
    data["writers"]["rank1"]["error"] = "RuntimeError: stitching failed"
    (root / "global_step_4" / "manifest.json").write_text(json.dumps(data))
    rows = step_rows(root)["steps"]
    assert [r["global_step"] for r in rows] == [3, 4]
    (unreadable,) = rows[0]["unreadable"]
    assert unreadable.startswith(f"{broken.name}: TraceFormatError"), unreadable
    assert rows[0]["error"] is None and rows[0]["ranks"] == ["rank1"]  # the readable rank is kept
    assert rows[0]["stages"]["decode"]["iterations"] == 4
    assert rows[1]["state"] == "failed" and rows[1]["error"] == "RuntimeError: stitching failed"
    assert rows[1]["stages"]  # what the failed step's traces hold is still reported


def test_the_profilers_pauses_are_counted_apart(tmp_path):
    status, folder = record(tmp_path, 7, chunk=3, n=8)  # two rotations and the final stop
    (row,) = step_rows(tmp_path)["steps"]
    assert row["global_step"] == 7 and row["profiler_pauses"] == status["stops"] == 3
    assert row["iterations"] == 8 and row["iteration_ms_total"] > 0


def test_device_time_is_a_partition_of_the_iterations_kernels(tmp_path):
    """On vLLM-GPU-shaped Kineto traces (eager prefill, CUDA-graph decode, NCCL all-reduces, memcpys on
    several streams), each rank's device time over its iterations equals an independent sweep of the
    events: the kernels launched inside an ``rlprof::iteration`` (by correlation id: a graph's kernels
    share its ``cudaGraphLaunch``'s), split into compute, exposed communication, exposed memcpy and idle,
    which add up to the window; per stage and per iteration likewise."""
    folder = tmp_path / "global_step_1"
    folder.mkdir()
    for rank in (0, 1):
        write_gpu_rank(folder / f"rank{rank}.{1795366444000000000 + rank}.pt.trace.json.gz", rank=rank,
                       megabytes=1.5, seed=1)
    (row,) = step_rows(tmp_path)["steps"]
    assert row["ranks"] == ["rank0", "rank1"] and row["operators"]["device"]
    for rank, times in row["rank_time"].items():
        events = load_trace(next(folder.glob(f"{rank}.*")))["traceEvents"]
        iterations = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in events
                            if e.get("cat") == "user_annotation" and e["name"].startswith("rlprof::iteration"))
        launched = {e["args"]["correlation"]: e["ts"] for e in events if e.get("cat") == "cuda_runtime"}

        def iteration_of(e):
            ts = launched.get(e["args"].get("correlation"))
            return next((k for k, (a, b, _) in enumerate(iterations) if ts is not None and a <= ts <= b), None)

        work = [(e, iteration_of(e)) for e in events
                if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
        windows = [(min(e["ts"] for e, k in work if k == i), max(e["ts"] + e["dur"] for e, k in work if k == i))
                   for i in range(len(iterations)) if any(k == i for _, k in work)]
        expected = _sweep([e for e, k in work if k is not None], windows)
        device = times["device"]
        assert expected["communication"] > 0 and expected["memcpy"] > 0 and expected["idle"] > 0
        assert expected["between_iterations"] > 0  # the host's time between two iterations: idle of no iteration
        for key, us in expected.items():
            assert abs(device[f"{key}_ms"] - us / 1000) < 0.002, (rank, key, device, expected)
        parts = sum(device[k] for k in ("compute_ms", "exposed_communication_ms", "exposed_memcpy_ms", "idle_ms",
                                        "between_iterations_ms"))
        assert abs(parts - device["window_ms"]) < 0.005
        # the rank's parts are its stages' sums (each its iterations'), the time between them apart
        for key in ("compute_ms", "exposed_communication_ms", "exposed_memcpy_ms", "idle_ms", "communication_ms"):
            stages = sum(part[key] for part in times["device_by_stage"].values())
            assert abs(device[key] - stages) < 0.005 * device["window_ms"], (rank, key, device, stages)
        # per stage: the sum over its iterations, each its own window
        assert set(times["device_by_stage"]) == {"prefill", "decode"}
        for stage, part in times["device_by_stage"].items():
            mine = [[e for e, k in work if k == i] for i, it in enumerate(iterations) if f"[{stage}]" in it[2]]
            sums = {key: sum(_sweep(kernels)[key] for kernels in mine if kernels) for key in expected
                    if key != "between_iterations"}
            for key, us in sums.items():
                assert abs(part[f"{key}_ms"] - us / 1000) < 0.002 * len(mine), (rank, stage, key)
    # per iteration: the slowest rank's
    assert len(row["iteration_device"]) == len(row["timeline"]) and all(row["iteration_device"])
    decode = [d for it, d in zip(row["timeline"], row["iteration_device"]) if it[1] == "decode"]
    assert decode and all(d["communication_ms"] > 0 for d in decode)


def _sweep(events, windows=None) -> dict[str, float]:
    """The partition by brute force: every boundary of every event, each slice given to the first class
    covering it (compute, then communication, then memcpy), idle where none does and an iteration's window
    (``windows``: their first and last instants; None: one window, all of it) holds it, else between."""
    def kind(e):
        return "memcpy" if e["cat"] != "kernel" else "communication" if "nccl" in e["name"].lower() else "compute"

    spans = [(e["ts"], e["ts"] + e["dur"], kind(e)) for e in events]
    points = sorted({p for a, b, _ in spans for p in (a, b)})
    out = dict.fromkeys(("window", "compute", "exposed_communication", "exposed_memcpy", "idle", "communication",
                         "memcpy") + (("between_iterations",) if windows else ()), 0.0)
    for a, b in zip(points, points[1:]):
        covering = {k for s, e, k in spans if s <= a and b <= e}
        width = b - a
        out["window"] += width
        for k in ("communication", "memcpy"):
            out[k] += width if k in covering else 0.0
        first = next((k for k in ("compute", "communication", "memcpy") if k in covering), None)
        if first is None and windows and not any(s <= a and b <= e for s, e in windows):
            out["between_iterations"] += width
            continue
        out[{"compute": "compute", "communication": "exposed_communication", "memcpy": "exposed_memcpy",
             None: "idle"}[first]] += width
    return out


def test_a_device_item_with_malformed_args_costs_that_item_not_the_trace(tmp_path):
    """``args`` that is no object (a writer's slip) leaves that kernel out of the iterations' device time;
    the trace, its iterations and its other kernels still read."""
    folder = tmp_path / "global_step_1"
    folder.mkdir()
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 10, "dur": 5,
         "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 20, "dur": 30, "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 60, "dur": 30, "args": [7]},
    ]
    (folder / "rank0.1795366444000000000.pt.trace.json").write_text(json.dumps({"traceEvents": events}))
    (row,) = step_rows(tmp_path)["steps"]
    assert row["unreadable"] == [] and row["iterations"] == 1
    device = row["rank_time"]["rank0"]["device"]
    assert device["window_ms"] == device["compute_ms"] == 0.03 and device["idle_ms"] == 0.0
