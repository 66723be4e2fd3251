"""Our keys on vLLM's real argument parser and in-process config paths."""

import pytest

from rlprof_plugins.errors import OptionsError
from rlprof_plugins.config.options import ProfileOptions, parse_options


def sampled(step_start: int, step_end: int | None) -> ProfileOptions:
    """The options of a configuration that writes no stack key: its window, and sampled stacks."""
    import dataclasses

    return dataclasses.replace(parse_options({"python_stacks": "sampled"}), step_start=step_start, step_end=step_end)
from rlprof_plugins.patches.vllm.config import build_profiler_config, options_of, plugin_handles


@pytest.fixture
def parser(vllm_patched):
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return make_arg_parser(FlexibleArgumentParser())


def parse(parser, *argv):
    return parser.parse_args(["--model", "m", *argv])


def test_json_form(parser, tmp_path):
    args = parse(parser, "--profiler-config",
                 f'{{"profiler":"torch","torch_profiler_dir":"{tmp_path}","step_start":2,"step_end":6}}')
    assert type(args.profiler_config).__name__ == "ProfilerConfig"
    assert args.profiler_config.torch_profiler_dir == str(tmp_path)
    assert options_of(args.profiler_config) == sampled(2, 6)


def test_dotted_form(parser, tmp_path):
    args = parse(parser, "--profiler-config.profiler", "torch", "--profiler-config.torch_profiler_dir", str(tmp_path),
                 "--profiler-config.step_start", "3")
    assert options_of(args.profiler_config) == sampled(3, None)


@pytest.mark.parametrize(
    "extra, message",
    [
        ('"step_strat":2', "'step_strat': unknown key (did you mean 'step_start'?)"),
        ('"step_start":-1', "'step_start': must be >= 0"),
        ('"step_start":"2"', "'step_start': must be an integer"),
        ('"step_start":3,"step_end":3', "'step_end': must be greater than step_start (3)"),
        ('"step_end":2,"delay_iterations":1', "cannot be combined with delay_iterations"),
    ],
)
def test_bad_config_fails_at_parse_naming_the_key(parser, tmp_path, capsys, extra, message):
    with pytest.raises(SystemExit):
        parse(parser, "--profiler-config", f'{{"profiler":"torch","torch_profiler_dir":"{tmp_path}",{extra}}}')
    assert message in capsys.readouterr().err


def test_our_keys_need_the_torch_profiler(parser, capsys):
    with pytest.raises(SystemExit):
        parse(parser, "--profiler-config", '{"step_start":1}')
    assert "'step_start': needs \"profiler\": \"torch\"" in capsys.readouterr().err


def test_native_keys_still_validated_by_vllm(parser, capsys):
    with pytest.raises(SystemExit):
        parse(parser, "--profiler-config", '{"profiler":"torch","torch_profiler_dir":"/x","delay_iterations":-1}')
    assert "delay_iterations" in capsys.readouterr().err


def test_dict_path_for_in_process_users(vllm_patched, tmp_path):
    cfg = build_profiler_config({"profiler": "torch", "torch_profiler_dir": str(tmp_path), "step_end": 4})
    assert options_of(cfg) == sampled(0, 4) and plugin_handles(cfg)
    with pytest.raises(OptionsError) as e:
        build_profiler_config({"profiler": "torch", "torch_profiler_dir": str(tmp_path), "step_edn": 4})
    assert e.value.key == "step_edn"


def test_native_delay_and_max_map_to_an_exact_window(tmp_path):
    from vllm.config import ProfilerConfig

    cfg = ProfilerConfig(profiler="torch", torch_profiler_dir=str(tmp_path), delay_iterations=2, max_iterations=3)
    assert options_of(cfg) == ProfileOptions(2, 5)


def test_configs_rlprof_leaves_to_vllm(tmp_path):
    from vllm.config import ProfilerConfig

    assert not plugin_handles(ProfilerConfig())
    assert plugin_handles(ProfilerConfig(profiler="torch", torch_profiler_dir="gs://bucket/x"))  # "Object stores"
    assert not plugin_handles(ProfilerConfig(profiler="torch", torch_profiler_dir=str(tmp_path), warmup_iterations=1))


@pytest.mark.parametrize("written, stacks", [
    ({}, "sampled"),  # a configuration silent on stacks
    ({"torch_profiler_with_stack": True}, None),  # vLLM's meaning: exact (python_stacks null follows it)
    ({"torch_profiler_with_stack": False}, None),  # and none
    ({"python_stacks": "exact"}, "exact"),
])
def test_stacks_a_configuration_gives(parser, tmp_path, written, stacks):
    """What the native engine accepts keeps its meaning: only a configuration that writes neither stack key
    gets sampled stacks, on the CLI's JSON and on the dict path in-process users take."""
    import json

    config = {"profiler": "torch", "torch_profiler_dir": str(tmp_path), **written}
    args = parse(parser, "--profiler-config", json.dumps(config))
    assert options_of(args.profiler_config).backend_keys["python_stacks"] == stacks
    assert options_of(build_profiler_config(config)).backend_keys["python_stacks"] == stacks


def test_vllms_own_window_keeps_its_meaning_beside_the_default_stacks(parser, tmp_path):
    """delay_iterations/max_iterations (vLLM's window, never beside rlprof's keys) still map onto
    [D, D+M) now that a configuration silent on stacks carries rlprof's stack default."""
    args = parse(parser, "--profiler-config", f'{{"profiler":"torch","torch_profiler_dir":"{tmp_path}",'
                                              '"delay_iterations":2,"max_iterations":3}')
    options = options_of(args.profiler_config)
    assert (options.step_start, options.step_end, options.backend_keys["python_stacks"]) == (2, 5, "sampled")
