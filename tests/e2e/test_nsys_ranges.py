"""What Nsight Systems sees of a live vLLM server with ``"profiler": "cuda"``, without nsys or a GPU:
every NVTX range its processes emit, recorded by the injection library the tests build with ``cc``
(tests/helpers/nvtx_log.py, loaded through ``NVTX_INJECTION64_PATH`` as nsys loads its own). CPU
only, so the capture calls are skipped with one warning; tests/unit/test_cuda_backend.py checks them
against the CUDA runtime stand-in. SGLang's ``CUDA_PROFILER``: tests/e2e/test_sglang_native.py."""

from __future__ import annotations

import json
import re

import pytest

from tests.helpers import nvtx_log
from tests.helpers.vllm_server import start_server

# `make test-extended` (CI's 25 minutes: docs/testing.md). CI runs the cuda backend driven as an engine drives it,
# its real NVTX ranges read by the same recorder (tests/unit/test_cuda_backend.py), and SGLang's live CUDA_PROFILER
# sessions' ranges from a real server (tests/e2e/test_sglang_native.py).
pytestmark = pytest.mark.extended

ITERATION = re.compile(r"^rlprof::iteration (\d+) \[(prefill|decode)\]")


@pytest.fixture(scope="module")
def vllm_cuda(tmp_path_factory):
    """vLLM's Nsight mode on CPU, the issue's window [2, 6) as the server default, step folders under output_dir."""
    tmp = tmp_path_factory.mktemp("vllm-cuda")
    config = {"profiler": "cuda", "output_dir": str(tmp / "traces"), "step_start": 2, "step_end": 6}
    server = start_server(tmp, config, env=nvtx_log.environment(tmp / "nvtx"))
    server.trace_dir = tmp / "traces"
    yield server
    server.stop()


def step_range(server, step: int) -> tuple[nvtx_log.Range, list[int]]:
    ranges = nvtx_log.read(server.trace_dir.parent / "nvtx")
    (found,) = [r for r in ranges if r.domain == "rlprof" and r.name == f"global_step_{step}"]
    inner = [ITERATION.match(r.name) for r in nvtx_log.inside(ranges, found)]
    assert all(inner), [r.name for r in nvtx_log.inside(ranges, found)]
    return found, [int(m.group(1)) for m in inner]


def test_global_step_37_holds_exactly_its_window_from_the_worker(vllm_cuda):
    r = vllm_cuda.post("/start_profile", {"global_step": 37})
    assert r.status_code == 200, r.text
    vllm_cuda.complete(max_tokens=12)
    status = vllm_cuda.wait_state()
    assert status["state"] == "done", status
    found, iterations = step_range(vllm_cuda, 37)
    assert iterations == [2, 3, 4, 5]
    assert found.pid != vllm_cuda.process.pid  # the worker's process (EngineCore), not the API server's
    (path,) = (vllm_cuda.trace_dir / "global_step_37" / "ranks").glob("*.nsys.json")
    capture = json.loads(path.read_text())
    assert capture["pid"] == found.pid and capture["nvtx_capture"] == "global_step_37@rlprof"
    assert capture["iterations"] == {"count": 4, "first": 2, "last": 5}
    assert capture["capture_range"] is None and "no CUDA device" in capture["capture_skipped"]
    assert status["files"] == [str(path)]  # /profile_status answers as for torch traces
    manifest = json.loads((vllm_cuda.trace_dir / "global_step_37" / "manifest.json").read_text())
    assert manifest["state"] == "done" and manifest["global_step"] == 37
    assert [f["kind"] for f in manifest["files"]] == ["nsys_capture"]


def test_a_stop_driven_session_and_one_warning_for_the_missing_device(vllm_cuda):
    assert vllm_cuda.post("/start_profile", {"global_step": 38, "step_start": 0, "step_end": None}).status_code == 200
    vllm_cuda.complete(max_tokens=4)
    stopped = vllm_cuda.post("/stop_profile", {})
    assert stopped.status_code == 200, stopped.text
    assert vllm_cuda.wait_state()["state"] == "done"
    _, iterations = step_range(vllm_cuda, 38)
    assert iterations and iterations == list(range(len(iterations)))
    assert vllm_cuda.log().count("records NVTX ranges only") == 1


def test_bad_input_is_refused_naming_the_field(vllm_cuda):
    for body, field in (({"global_step": 39, "activities": ["CPU", "CUDA_PROFILER"]}, "activities"),
                        ({"global_step": 39, "step_start": 4, "step_end": 2}, "step_end")):
        r = vllm_cuda.post("/start_profile", body)
        assert r.status_code == 400 and r.json()["error"]["field"] == field, r.text
    assert vllm_cuda.get("/profile_status").json()["state"] == "done"  # nothing started
