import pytest

from tests.helpers.vllm_server import start_server


@pytest.fixture(scope="module")
def server_tp1(tmp_path_factory):
    """TP=1 with the issue's example window as the server default, and no stack key: the default
    path, sampled Python stacks (test_vllm_server_tp1.py checks them). VLLM_SERVER_DEV_MODE serves vLLM's
    /pause and /resume routes, which the rollout's long tail releases its prompts with."""
    tmp = tmp_path_factory.mktemp("tp1")
    config = {"profiler": "torch", "torch_profiler_dir": str(tmp / "traces"), "step_start": 2, "step_end": 6}
    server = start_server(tmp, config, env={"VLLM_SERVER_DEV_MODE": "1"})
    yield server
    server.stop()


@pytest.fixture(scope="module")
def server_tp2(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tp2")
    # step_source weight_version: only starts that name no global_step read it (one test does);
    # VLLM_SERVER_DEV_MODE serves vLLM's /update_weight_version route
    config = {"profiler": "torch", "torch_profiler_dir": str(tmp / "traces"), "torch_profiler_with_stack": False,
              "merge": True, "step_source": "weight_version"}
    server = start_server(tmp, config, tp=2, env={"VLLM_SERVER_DEV_MODE": "1"})
    yield server
    server.stop()


@pytest.fixture(scope="module")
def sglang_tp1(tmp_path_factory):
    """SGLang TP=1 configured with --profiler-config, window [2, 6) by default, and no stack key: the
    default path, sampled Python stacks (test_sglang_server_tp1.py checks them)."""
    from tests.helpers.sglang_server import start_server as start_sglang

    tmp = tmp_path_factory.mktemp("sglang-tp1")
    config = {"torch_profiler_dir": str(tmp / "traces"), "step_start": 2, "step_end": 6}
    server = start_sglang(tmp, config, sleep_on_idle=False)  # SGLang's default idle loop: the bursty test is about it
    yield server
    server.stop()
