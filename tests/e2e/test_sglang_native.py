"""SGLang without rlprof configuration: native requests behave exactly as
without the plugin; rlprof's fields still work; bad configuration stops the
launch naming the key."""

import gzip
import json
import re

import pytest

from tests.helpers import nvtx_log
from tests.helpers.traces import iteration_indices, load_trace, manifest_traces


@pytest.fixture(scope="module")
def sglang_plain(tmp_path_factory):
    from tests.helpers.sglang_server import start_server

    tmp = tmp_path_factory.mktemp("sglang-plain")
    # NVTX ranges go to tmp/nvtx (tests/helpers/nvtx_log.py): only CUDA_PROFILER sessions emit any
    server = start_server(tmp, None, env=nvtx_log.environment(tmp / "nvtx"))
    server.nvtx_dir = tmp / "nvtx"
    yield server
    server.stop()


def test_native_request_is_served_by_sglang_unchanged(sglang_plain, tmp_path):
    out = tmp_path / "native"
    body = {"output_dir": str(out), "activities": ["CPU"], "with_stack": False, "profile_prefix": "p"}
    r = sglang_plain.post("/start_profile", body)
    assert r.status_code == 200 and r.text == "Start profiling.\n"  # SGLang's own answer
    sglang_plain.complete(max_tokens=4)
    stop = sglang_plain.post("/stop_profile")
    assert stop.status_code == 200 and stop.text == "Stop profiling. This will take some time.\n"
    (trace,) = out.glob("*.trace.json.gz")
    assert trace.name.startswith("p-") and trace.name.endswith("-TP-0.trace.json.gz")  # SGLang's naming
    with gzip.open(trace, "rt") as f:
        events = json.load(f)["traceEvents"]
    assert not any(str(e.get("name", "")).startswith("rlprof::") for e in events)
    assert sglang_plain.post("/stop_profile").status_code == 500  # SGLang's answer to a double stop


def test_rlprof_fields_work_without_configuration(sglang_plain, tmp_path):
    out = tmp_path / "rl"
    r = sglang_plain.post("/start_profile", {"global_step": 2, "output_dir": str(out), "num_steps": 3,
                                             "with_stack": False})
    assert r.status_code == 200, r.text
    sglang_plain.complete(max_tokens=6)
    status = sglang_plain.wait_state()
    assert status["state"] == "done", status
    traces = manifest_traces(out / "global_step_2")
    assert list(traces) == ["TP-0"] and iteration_indices(load_trace(traces["TP-0"])) == [0, 1, 2]
    # from now on this server's stops go through rlprof: a stop with nothing running is answered as SGLang
    # answers it (200, ignored: said in the answer), and with rlprof's ``wait`` a clear 409
    assert sglang_plain.post("/stop_profile").status_code == 200  # acknowledges the window's end
    assert sglang_plain.post("/stop_profile").json()["status"] == "ignored"
    assert sglang_plain.post("/stop_profile", {"wait": True}).status_code == 409


def test_cuda_profiler_marks_global_step_38_with_its_iterations(sglang_plain, tmp_path):
    """SGLang's Nsight activity through rlprof: every scheduler (not only the base GPU's) opens a
    global_step_38 range in the rlprof domain holding the session's iterations, as Nsight Systems would
    see them; no CUDA here, so the capture calls are skipped (tests/unit/test_cuda_backend.py)."""
    out = tmp_path / "nsys"
    body = {"global_step": 38, "output_dir": str(out), "activities": ["CUDA_PROFILER"], "num_steps": 3}
    r = sglang_plain.post("/start_profile", body)
    assert r.status_code == 200, r.text
    sglang_plain.complete(max_tokens=6)
    status = sglang_plain.wait_state()
    assert status["state"] == "done", status
    ranges = nvtx_log.read(sglang_plain.nvtx_dir)
    (step,) = [r for r in ranges if r.domain == "rlprof" and r.name == "global_step_38"]
    names = [r.name for r in nvtx_log.inside(ranges, step)]
    assert [int(re.match(r"rlprof::iteration (\d+) ", n).group(1)) for n in names] == [0, 1, 2], names
    assert step.pid != sglang_plain.process.pid  # the scheduler's process
    (capture,) = (out / "global_step_38" / "ranks").glob("*.nsys.json")
    assert json.loads(capture.read_text())["iterations"] == {"count": 3, "first": 0, "last": 2}
    assert sglang_plain.post("/stop_profile").status_code == 200  # acknowledges the window's end
    mixed = sglang_plain.post("/start_profile", {**body, "global_step": 39, "activities": ["GPU", "CUDA_PROFILER"]})
    assert mixed.status_code == 400 and mixed.json()["error"]["field"] == "activities", mixed.text


# the environment variable's form in `make test-extended` (CI's 25 minutes: docs/testing.md); the flag's in CI
@pytest.mark.parametrize("how", ["flag", pytest.param("env", marks=pytest.mark.extended)])
def test_bad_configuration_stops_the_launch_naming_the_key(tmp_path, how):
    from tests.helpers.sglang_server import run_until_exit

    bad = json.dumps({"torch_profiler_dir": str(tmp_path), "step_strat": 2})
    if how == "flag":
        done = run_until_exit(tmp_path, ["--profiler-config", bad])
    else:
        done = run_until_exit(tmp_path, [], env={"RLPROF_PROFILER_CONFIG": bad})
    assert done.returncode != 0
    assert "step_strat" in done.stderr and "did you mean 'step_start'" in done.stderr
    assert ("--profiler-config" if how == "flag" else "$RLPROF_PROFILER_CONFIG") in done.stderr
    assert "Load weight" not in done.stderr  # it stopped before any model was loaded
