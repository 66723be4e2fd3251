"""Invalid configuration stops the real server at start-up, naming the key."""

import pytest

from tests.helpers.vllm_server import run_until_exit


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--profiler-config", '{"profiler":"torch","torch_profiler_dir":"/tmp/x","step_strat":2}'],
         "profiler config key 'step_strat': unknown key (did you mean 'step_start'?)"),
        (["--profiler-config.profiler", "torch", "--profiler-config.torch_profiler_dir", "/tmp/x",
          "--profiler-config.step_end", "-4"],
         "profiler config key 'step_end': must be >= 0, got -4"),
    ],
)
def test_bad_profiler_config_exits_naming_the_key(tmp_path, argv, message):
    result = run_until_exit(tmp_path, argv)
    assert result.returncode == 2, result.stderr[-2000:]
    assert message in result.stderr
