"""The npu backend under the real session controller, against the torch_npu
stand-in (tests/stand_ins/npu): what it passes to torch_npu for each option,
and the folders, manifest and traces that come out. What the stand-in cannot
show (device data, the real analysis) is listed in docs/npu.md."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rlprof_plugins.cli import command as cli
from rlprof_plugins.backends import which_backend
from rlprof_plugins.backends.kind import BuildContext
from rlprof_plugins.backends.torch_profiler import TorchSettings
from rlprof_plugins.errors import OptionsError
from rlprof_plugins.config.options import parse_options
from rlprof_plugins.session.controller import ProfilerController
from tests.helpers.traces import iteration_details, iteration_indices, load_trace, merged_file, rank_folder
from tests.unit.test_session import DECODE, PREFILL, run_iterations, settle, start


def npu_controller(root, options, rank=0, expected=1):
    name = f"rank{rank}"
    return ProfilerController(
        root_dir=str(root),
        worker_name=lambda prefix: f"{prefix}_{name}" if prefix else name,
        rank_name=name,
        backend_factory=which_backend.factory("npu", BuildContext(lambda table, _o: TorchSettings(), options)),
        manifest_header={"engine": "test", "expected_ranks": expected, "parallel": {"tp": expected, "pp": 1}},
    )


def ascend_dirs(folder):
    return sorted(p for p in rank_folder(folder).iterdir() if p.is_dir() and p.name.endswith("_ascend_pt"))


def calls_of(profile_dir) -> dict:
    return {name: kwargs for name, kwargs in json.loads((profile_dir / "standin_calls.json").read_text())}


def record_step(root, options, global_step=37, window=(1, 3), iterations=5, infos=(PREFILL, DECODE), **cmd):
    ctl = npu_controller(root, options)
    assert start(ctl, global_step=global_step, step_start=window[0], step_end=window[1], **cmd)["ok"]
    run_iterations(ctl, iterations, list(infos))
    return settle(ctl, global_step)


def test_defaults_record_a_bounded_profile_in_the_step_folder(torch_npu, tmp_path):
    status = record_step(tmp_path, parse_options({}))
    assert status["state"] == "done" and status["ended_by"] == "window", status
    folder = tmp_path / "global_step_37"
    [profile] = ascend_dirs(folder)
    assert profile.name.startswith("rank0_")  # torch_npu's naming, with the rank's name
    assert not list(folder.rglob(".rlprof-npu-*")), "staging folder left behind"
    calls = calls_of(profile)
    assert calls["profile"]["activities"] == ["CPU", "NPU"]
    assert (calls["profile"]["with_stack"], calls["profile"]["with_modules"], calls["profile"]["profile_memory"],
            calls["profile"]["record_shapes"]) == (False, False, False, False)
    exp = calls["_ExperimentalConfig"]
    assert (exp["profiler_level"], exp["aic_metrics"], exp["export_type"], exp["data_simplification"]) == (
        torch_npu.profiler.ProfilerLevel.Level0, torch_npu.profiler.AiCMetrics.AiCoreNone, ["text"], True)
    handler = calls["tensorboard_trace_handler"]
    assert handler["worker_name"] == "rank0" and handler["analyse_flag"] is False  # analysed off the engine
    # analysed by rlprof (in a child process): the timeline holds exactly the window
    trace = load_trace(profile / "ASCEND_PROFILER_OUTPUT" / "trace_view.json")
    assert iteration_indices(trace) == [1, 2]
    assert {i: d[0] for i, d in iteration_details(trace).items()} == {1: "decode", 2: "prefill"}
    assert not (profile / "FRAMEWORK").exists()  # data simplification removed the raw data
    manifest = json.loads((folder / "manifest.json").read_text())
    [entry] = manifest["files"]
    assert entry["kind"] == "npu_profile" and entry["path"] == f"ranks/{profile.name}" and entry["bytes"] > 0
    assert manifest["state"] == "done" and manifest["writers"]["rank0"]["stage_iterations"] == {"decode": 1, "prefill": 1}


def test_every_npu_option_reaches_torch_npu(torch_npu, tmp_path):
    options = parse_options({
        "backend": "npu", "npu_profiler_level": "Level2", "npu_aic_metrics": "PipeUtilization",
        "npu_export_type": ["text", "db"], "npu_data_simplification": False, "npu_with_modules": True,
        "npu_with_stack": True, "npu_with_memory": True, "npu_record_shapes": True})
    assert record_step(tmp_path, options)["state"] == "done"
    [profile] = ascend_dirs(tmp_path / "global_step_37")
    calls = calls_of(profile)
    p = calls["profile"]
    assert (p["with_stack"], p["with_modules"], p["profile_memory"], p["record_shapes"]) == (True, True, True, True)
    exp = calls["_ExperimentalConfig"]
    assert exp["profiler_level"] == "Level2" and exp["aic_metrics"] == "ACL_AICORE_PIPE_UTILIZATION"
    assert exp["export_type"] == ["text", "db"] and exp["data_simplification"] is False
    out = profile / "ASCEND_PROFILER_OUTPUT"
    assert (out / "trace_view.json").exists() and (out / "ascend_pytorch_profiler.db").exists()
    assert (profile / "FRAMEWORK").exists()  # kept without data simplification


def test_by_stage_splits_the_analysed_timeline(torch_npu, tmp_path):
    status = record_step(tmp_path, parse_options({"by_stage": True}), window=(0, 4), by_stage=True)
    assert status["state"] == "done", status
    folder = tmp_path / "global_step_37"
    manifest = json.loads((folder / "manifest.json").read_text())
    kinds = sorted((f["kind"], f["stage"]) for f in manifest["files"])
    assert kinds == [("npu_profile", "all"), ("trace", "decode"), ("trace", "prefill")]
    for f in manifest["files"]:
        if f["kind"] == "trace":
            stages = {d[0] for d in iteration_details(load_trace(folder / f["path"])).values()}
            assert stages == {f["stage"]}


def test_unanalysed_output_says_what_to_run_and_merges_after(torch_npu, tmp_path, capsys):
    options = parse_options({"npu_analyse": False, "merge": False})
    for rank in (0, 1):
        ctl = npu_controller(tmp_path, options, rank=rank, expected=2)
        start(ctl, global_step=3, step_start=0, step_end=2, session_id="step3")  # one id for all ranks, as the front end sends
        run_iterations(ctl, 3, [DECODE])
        assert settle(ctl, 3)["state"] == "done"
    folder = tmp_path / "global_step_3"
    assert all(not (p / "ASCEND_PROFILER_OUTPUT").exists() for p in ascend_dirs(folder))
    assert cli.main(["merge", str(folder), "-q"]) == 1
    assert "rlprof npu-analyse" in capsys.readouterr().err
    assert cli.main(["npu-analyse", str(tmp_path), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["analysed"]) == 2
    assert cli.main(["merge", str(folder), "--json", "-q"]) == 0
    merged = merged_file(folder)
    assert cli.main(["check", str(merged)]) == 0
    trace = load_trace(merged)
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    assert all(isinstance(e["ts"], float) and 0 <= e["ts"] < 3600e6 for e in events)  # rebased, exact
    names = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    assert any(n.startswith("rank0") for n in names) and any(n.startswith("rank1") for n in names)
    per_rank = {}
    for e in events:
        if e["name"].startswith("rlprof::iteration"):
            per_rank.setdefault(e["pid"], []).append(e["name"].split()[1])
    assert sorted(per_rank.values()) == [["0", "1"], ["0", "1"]]
    # the summary reads the analysed timelines too
    capsys.readouterr()
    assert cli.main(["summary", str(tmp_path), "--json", "-q"]) == 0
    [stage] = json.loads(capsys.readouterr().out)["steps"][0]["stages"]
    assert stage["stage"] == "decode" and stage["iterations"] == 2  # as the iterations' names say
    assert sorted((r["rank"], r["iterations"]) for r in stage["ranks"]) == [("rank0", 2), ("rank1", 2)]
    # and so does the step report: the timelines are the ranks' files, torch_npu's other output is not
    report = tmp_path / "report.json"
    assert cli.main(["report", str(tmp_path), "--json", str(report), "-q"]) == 0
    [row] = json.loads(report.read_text())["steps"]
    assert (row["global_step"], row["ranks"], row["iterations"]) == (3, ["rank0", "rank1"], 2)
    workers = sorted((f["rank"], f["path"].rsplit("/", 1)[-1]) for f in row["files"] if f["role"] == "worker")
    assert workers == [("rank0", "trace_view.json"), ("rank1", "trace_view.json")]
    assert [f["role"] for f in row["files"]].count("merged") == 1


def test_backend_resolution_by_device():
    assert which_backend.resolve("auto", "npu") == "npu"
    assert which_backend.resolve("auto", "cuda") == "torch" and which_backend.resolve("auto", "cpu") == "torch"
    assert which_backend.resolve("npu", "cpu") == "npu"
    with pytest.raises(OptionsError) as e:
        which_backend.resolve("torch", "npu")
    assert e.value.key == "backend"


def test_auto_is_npu_where_torch_npu_sees_a_device(torch_npu, monkeypatch):
    assert which_backend.device_type() in ("cpu", "cuda")  # the stand-in has no device
    monkeypatch.setattr(torch_npu.profiler, "CALLS", torch_npu.profiler.CALLS)  # keep the stand-in imported
    import torch

    monkeypatch.setattr(torch.npu, "is_available", lambda: True)
    assert which_backend.device_type() == "npu"


@pytest.mark.parametrize("config,key", [
    ({"backend": "gpu"}, "backend"),
    ({"npu_profiler_level": "Level3"}, "npu_profiler_level"),
    ({"npu_aic_metrics": "Pipe"}, "npu_aic_metrics"),
    ({"npu_export_type": ["json"]}, "npu_export_type"),
    ({"npu_with_stack": "yes"}, "npu_with_stack"),
])
def test_bad_npu_options_name_the_key(config, key):
    with pytest.raises(OptionsError) as e:
        parse_options(config)
    assert e.value.key == key


def test_npu_backend_needs_torch_npu_installed():
    code = "from rlprof_plugins.config.options import parse_options; parse_options({'backend': 'npu'})"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode != 0 and "backend" in proc.stderr and "torch_npu is not installed" in proc.stderr


def test_by_stage_without_analysis_is_refused(torch_npu):
    with pytest.raises(OptionsError) as e:
        parse_options({"backend": "npu", "by_stage": True, "npu_analyse": False})
    assert e.value.key == "npu_analyse"


def test_a_backend_that_cannot_start_fails_the_session_and_leaves_nothing(torch_npu, tmp_path):
    from rlprof_plugins.config.options import ProfileOptions

    # unvalidated (built, not parsed): torch_npu has no such level
    broken = ProfileOptions(backend_keys={**ProfileOptions().backend_keys, "npu_profiler_level": "Level9"})
    ctl = ProfilerController(root_dir=str(tmp_path), worker_name=lambda prefix: "rank0",
                             backend_factory=which_backend.factory("npu", BuildContext(lambda t, o: TorchSettings(), broken)),
                             manifest_header={"engine": "test", "expected_ranks": 1})
    reply = start(ctl, global_step=2, step_start=0, step_end=1)
    assert reply["session"]["state"] == "failed" and "Level9" in reply["session"]["error"]
    left = sorted(str(p.relative_to(tmp_path / "global_step_2")) for p in (tmp_path / "global_step_2").rglob("*"))
    assert [p for p in left if p not in ("manifest.json", ".manifest.lock")] in ([], ["ranks"]), left


def test_failed_analysis_keeps_the_recording_and_says_how_to_finish(torch_npu, tmp_path, monkeypatch, capsys):
    """torch_npu's analysis fails (no CANN toolkit): the raw ``*_ascend_pt``
    recording stays in the step folder, the step says ``failed`` with the
    analysis error and the command that finishes it, and that command does."""
    monkeypatch.setenv("RLPROF_STANDIN_NO_CANN", "1")
    status = record_step(tmp_path, parse_options({"backend": "npu"}))
    assert status["state"] == "failed", status
    assert "msprof not found" in status["error"] and "rlprof npu-analyse" in status["error"]
    folder = tmp_path / "global_step_37"
    (raw,) = ascend_dirs(folder)
    assert (raw / "profiler_info.json").exists() and not (raw / "ASCEND_PROFILER_OUTPUT").exists()
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["state"] == "failed"
    assert [f["kind"] for f in manifest["files"]] == ["npu_profile"]  # the kept recording, listed
    assert not list(folder.rglob(".rlprof-npu-*"))  # no staging left
    monkeypatch.delenv("RLPROF_STANDIN_NO_CANN")
    assert cli.main(["npu-analyse", str(raw), "--json"]) == 0
    capsys.readouterr()
    view = raw / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    assert iteration_indices(load_trace(view)) == [1, 2]  # the window, recovered


def test_failed_stage_split_keeps_the_whole_trace(tmp_path, monkeypatch):
    """torch backend: splitting by stage fails after the trace was written:
    the whole trace stays, listed, and the error says how to split it later."""
    from rlprof_plugins.backends import torch_profiler

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch_profiler, "split_in_subprocess", broken)
    ctl = ProfilerController(
        root_dir=str(tmp_path), worker_name=lambda prefix: "rank0", rank_name="rank0",
        backend_factory=lambda table, overrides: torch_profiler.TorchProfilerBackend(TorchSettings()),
        manifest_header={"engine": "test", "expected_ranks": 1},
    )
    assert start(ctl, global_step=4, step_start=0, step_end=2, by_stage=True)["ok"]
    run_iterations(ctl, 3, [PREFILL, DECODE])
    status = settle(ctl, 4)
    assert status["state"] == "failed" and "rlprof split-stages" in status["error"], status
    (kept,) = status["files"]
    assert kept.endswith(".pt.trace.json") and iteration_indices(load_trace(kept)) == [0, 1]
    monkeypatch.undo()  # the splitter works again: the command the error gives finishes the job
    template = status["error"].split(" -o ")[1].strip("'")
    assert template == str(tmp_path / "global_step_4" / "{stage}")
    assert cli.main(["split-stages", kept, "-o", template, "--json"]) == 0
    for stage, indices in (("prefill", [0]), ("decode", [1])):
        (path,) = (tmp_path / "global_step_4" / stage).glob(f"rank0.*.{stage}.pt.trace.json.gz")
        assert iteration_indices(load_trace(path)) == indices
