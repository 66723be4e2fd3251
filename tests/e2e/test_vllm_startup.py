"""Invalid configuration stops the real server at start-up, naming the key."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.helpers.vllm_server import run_until_exit

# `make test-extended` (CI's 25 minutes: docs/testing.md): in CI, a bad configuration fails naming the key on
# vLLM's real argument parser (tests/vllm/test_vllm_config_keys.py) and at SGLang's launch (test_sglang_native.py)
pytestmark = pytest.mark.extended

BAD_CONFIGS = [
    (["--profiler-config", '{"profiler":"torch","torch_profiler_dir":"/tmp/x","step_strat":2}'],
     "profiler config key 'step_strat': unknown key (did you mean 'step_start'?)"),
    (["--profiler-config.profiler", "torch", "--profiler-config.torch_profiler_dir", "/tmp/x",
      "--profiler-config.step_end", "-4"],
     "profiler config key 'step_end': must be >= 0, got -4"),
    (["--profiler-config", '{"profiler":"torch","torch_profiler_dir":"/tmp/x","memory":true}'],
     "profiler config key 'memory': needs a device whose allocator keeps a memory history"),
]


@pytest.fixture(scope="module")
def launches(tmp_path_factory):
    """Every bad launch, started at once (each is mostly vLLM's imports)."""
    with ThreadPoolExecutor(max_workers=len(BAD_CONFIGS)) as pool:
        return list(pool.map(lambda config: run_until_exit(tmp_path_factory.mktemp("launch"), config[0]), BAD_CONFIGS))


@pytest.mark.parametrize("case", range(len(BAD_CONFIGS)), ids=["json-form", "dotted-form", "memory-on-cpu"])
def test_bad_profiler_config_exits_naming_the_key(launches, case):
    result, message = launches[case], BAD_CONFIGS[case][1]
    assert result.returncode == 2, result.stderr[-2000:]
    assert message in result.stderr
