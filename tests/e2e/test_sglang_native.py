"""SGLang without rlprof configuration: native requests behave exactly as
without the plugin; rlprof's fields still work; bad configuration stops the
launch naming the key."""

import gzip
import json

import pytest

from tests.helpers.traces import iteration_indices, load_trace, manifest_traces


@pytest.fixture(scope="module")
def sglang_plain(tmp_path_factory):
    from tests.helpers.sglang_server import start_server

    tmp = tmp_path_factory.mktemp("sglang-plain")
    server = start_server(tmp, None)
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
    # from now on this server's stops go through rlprof: a stop with nothing running is a clear 409
    assert sglang_plain.post("/stop_profile").status_code == 200  # acknowledges the window's end
    assert sglang_plain.post("/stop_profile").status_code == 409


@pytest.mark.parametrize("how", ["flag", "env"])
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
