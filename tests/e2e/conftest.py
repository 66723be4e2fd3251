import pytest

from tests.helpers.vllm_server import start_server


@pytest.fixture(scope="module")
def server_tp1(tmp_path_factory):
    """TP=1 with the issue's example window as the server default."""
    tmp = tmp_path_factory.mktemp("tp1")
    config = {"profiler": "torch", "torch_profiler_dir": str(tmp / "traces"), "torch_profiler_with_stack": False,
              "step_start": 2, "step_end": 6}
    server = start_server(tmp, config)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def server_tp2(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tp2")
    config = {"profiler": "torch", "torch_profiler_dir": str(tmp / "traces"), "torch_profiler_with_stack": False,
              "merge": True}
    server = start_server(tmp, config, tp=2)
    yield server
    server.stop()
