"""The cuda backend (Nsight Systems) driven as an engine drives it: real NVTX ranges through the
``nvtx`` package, read by the NVTX recorder the tests build with ``cc`` (tests/helpers/nvtx_log.py),
and the capture calls through the CUDA runtime stand-in (tests/stand_ins/cuda_runtime).

NVTX binds its tool on a process's first call, so each scenario runs in a fresh Python process
(``drive``) with the recorder loaded; the assertions read its NVTX log, the files and the status."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rlprof_plugins.backends import which_backend
from rlprof_plugins.backends.registry import KINDS
from rlprof_plugins.config.launch_config import parse_profiler_config
from rlprof_plugins.config.requests import Server, parse_start
from rlprof_plugins.config.options import ProfileOptions
from rlprof_plugins.errors import OptionsError, RequestError
from tests.helpers import nvtx_log

ITERATION = re.compile(r"^rlprof::iteration (\d+)")


def drive(root: str, scenario: str) -> None:
    """Run in the child: one controller with the cuda backend, the scenario's sessions, a JSON report."""
    import time

    from rlprof_plugins.backends.cuda_profiler import CudaProfilerBackend
    from rlprof_plugins.session.controller import ProfilerController
    from rlprof_plugins.stages import IterationInfo
    from tests.stand_ins.cuda_runtime import StandInCudaRuntime

    runtime = StandInCudaRuntime()
    use = {"stand-in": lambda: runtime, "none": lambda: None}[scenario.split(":")[0]]
    ctl = ProfilerController(
        root_dir=root, worker_name=lambda prefix: "rank0",
        backend_factory=lambda table, overrides, backend=None: CudaProfilerBackend(runtime=use),
        manifest_header={"engine": "test", "expected_ranks": 1})
    decode = IterationInfo(prefill_tokens=0, decode_tokens=4, batch_size=4)

    def iterate(n: int) -> None:
        for _ in range(n):
            if ctl.active:
                ctl.begin_iteration(decode)
                time.sleep(0.001)
                ctl.end_iteration()

    def settle(step: int) -> dict:
        deadline = time.monotonic() + 120  # a bound on a broken session, not a time the export is given
        while True:
            s = ctl.handle({"op": "status", "global_step": step})["session"]
            if s["state"] not in ("waiting", "recording", "exporting") or time.monotonic() > deadline:
                return s
            time.sleep(0.01)

    base = {"op": "start", "profile_prefix": None}
    if scenario.endswith(":fail"):
        runtime.fail_next = 719  # cudaErrorLaunchFailure
    report = {"starts": [ctl.handle({**base, "global_step": 37, "step_start": 2, "step_end": 6})]}
    iterate(9)
    report[37] = settle(37)
    report["starts"].append(ctl.handle({**base, "global_step": 38, "step_start": 0, "step_end": None}))
    iterate(3)
    report["stop"] = ctl.handle({"op": "stop"})
    iterate(1)  # the engine's next iteration completes a deferred stop
    report[38] = settle(38)
    report["calls"] = [name for name, _ in runtime.calls]
    report["nested"] = runtime.nested
    print(json.dumps(report))


def run(tmp_path: Path, scenario: str) -> tuple[dict, list[nvtx_log.Range], str]:
    logs = tmp_path / "nvtx"
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("NVTX")}
    env.update(nvtx_log.environment(logs))
    code = f"from tests.unit.test_cuda_backend import drive; drive({str(tmp_path / 'traces')!r}, {scenario!r})"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), nvtx_log.read(logs), done.stderr


def step_range(ranges: list[nvtx_log.Range], step: int) -> nvtx_log.Range:
    (found,) = [r for r in ranges if r.domain == "rlprof" and r.name == f"global_step_{step}"]
    assert found.kind == "start" and found.end_ns is not None
    return found


def iterations_in(ranges: list[nvtx_log.Range], outer: nvtx_log.Range) -> list[int]:
    return [int(ITERATION.match(r.name).group(1)) for r in nvtx_log.inside(ranges, outer) if ITERATION.match(r.name)]


def capture_file(root: Path, step: int) -> dict:
    (path,) = (root / f"global_step_{step}" / "ranks").glob("*.nsys.json")
    return json.loads(path.read_text())


def test_each_session_is_one_capture_range_around_its_step_and_iterations(tmp_path):
    report, ranges, _ = run(tmp_path, "stand-in")
    assert report["calls"] == ["cudaProfilerStart", "cudaProfilerStop"] * 2 and report["nested"] == 0
    s37, s38 = step_range(ranges, 37), step_range(ranges, 38)
    assert iterations_in(ranges, s37) == [2, 3, 4, 5]
    assert iterations_in(ranges, s38) == [0, 1, 2]
    # rlprof's ranges only: torch's ProfilerStep#N says nothing more in nsys
    assert {r.name.split(" ")[0] for r in ranges if r.domain == "rlprof"} == {"global_step_37", "global_step_38",
                                                                             "rlprof::iteration"}
    assert all(r.end_ns is not None for r in ranges)
    for step, ordinal, first, last in ((37, 1, 2, 5), (38, 2, 0, 2)):
        status = report[str(step)]
        assert status["state"] == "done", status
        capture = capture_file(tmp_path / "traces", step)
        assert capture["capture_range"] == ordinal and capture["capture_skipped"] is None
        assert capture["nvtx_capture"] == f"global_step_{step}@rlprof"
        assert capture["iterations"] == {"count": last - first + 1, "first": first, "last": last}
        assert f"--nvtx-capture='global_step_{step}@rlprof'" in capture["nsys"]["nvtx"]
        assert "--capture-range=cudaProfilerApi" in capture["nsys"]["cudaProfilerApi"]
        manifest = json.loads((tmp_path / "traces" / f"global_step_{step}" / "manifest.json").read_text())
        assert [f["kind"] for f in manifest["files"]] == ["nsys_capture"] and manifest["state"] == "done"


def test_without_cuda_the_capture_calls_are_skipped_with_one_warning(tmp_path):
    report, ranges, stderr = run(tmp_path, "none")
    assert iterations_in(ranges, step_range(ranges, 37)) == [2, 3, 4, 5]
    assert iterations_in(ranges, step_range(ranges, 38)) == [0, 1, 2]
    for step in (37, 38):
        capture = capture_file(tmp_path / "traces", step)
        assert capture["capture_range"] is None and "cudaProfilerStart/Stop skipped" in capture["capture_skipped"]
    assert stderr.count("records NVTX ranges only") == 1


def test_a_failing_capture_start_fails_the_session_and_closes_its_range(tmp_path):
    report, ranges, _ = run(tmp_path, "stand-in:fail")
    status = report["37"]
    assert status["state"] == "failed" and "cudaProfilerStart returned CUDA error 719" in str(status), status
    assert step_range(ranges, 37).end_ns is not None  # no range left open
    assert report["38"]["state"] == "done"  # the next session captures as usual
    assert capture_file(tmp_path / "traces", 38)["capture_range"] == 1


def test_the_stand_in_mirrors_the_calls_torch_makes():
    """torch's own Nsight helpers call the runtime binding by the names the stand-in answers to."""
    import inspect

    import torch.cuda.profiler as cuda_profiler

    source = inspect.getsource(cuda_profiler)
    assert "cudart().cudaProfilerStart()" in source and "cudart().cudaProfilerStop()" in source


# ---- configuration and requests ----------------------------------------------------
SERVER = Server(engine="sglang", defaults=ProfileOptions(), output_root="/tmp/rl", device="cpu")


def test_cuda_profiler_asks_for_the_cuda_backend_alone():
    request = parse_start({"global_step": 38, "activities": ["CUDA_PROFILER"], "num_steps": 3}, SERVER)
    assert request.backend == "cuda" and request.trace and (request.step_start, request.step_end) == (0, 3)
    assert request.to_command()["backend"] == "cuda"
    assert parse_start({"activities": ["CPU"]}, SERVER).backend is None
    for mix in (["CPU", "CUDA_PROFILER"], ["GPU", "CUDA_PROFILER"]):
        with pytest.raises(RequestError) as e:
            parse_start({"activities": mix}, SERVER)
        assert e.value.field == "activities" and "alone" in str(e.value)
    with pytest.raises(RequestError) as e:
        parse_start({"activities": ["CUDA_PROFILER"]}, Server(engine="sglang", defaults=ProfileOptions(),
                                                             output_root="/tmp/rl", device="npu"))
    assert e.value.field == "activities"


def test_profiler_cuda_in_the_configuration():
    config = parse_profiler_config({"profiler": "cuda", "output_dir": "/tmp/nsys-steps"})
    assert config.profiler == "cuda" and config.torch_profiler_dir == "/tmp/nsys-steps"
    assert which_backend.resolve(config.options.backend, "cpu", config.profiler) == "cuda"
    with pytest.raises(OptionsError) as e:
        parse_profiler_config({"profiler": "cuda", "backend": "npu"})
    assert e.value.key == "backend"
    with pytest.raises(OptionsError) as e:
        parse_profiler_config({"torch_profiler_dir": "/tmp/a", "output_dir": "/tmp/b"})
    assert e.value.key == "output_dir"
    with pytest.raises(OptionsError) as e:
        which_backend.resolve("torch", "cuda", "cuda")
    assert e.value.key == "backend"
    assert "cuda" not in [which_backend.resolve("auto", d) for d in ("cpu", "cuda", "xpu", "npu")]
    assert KINDS["cuda"].refuses["npu"]
