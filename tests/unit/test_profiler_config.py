"""``--profiler-config`` for SGLang: the same JSON keys and defaults as vLLM's."""

import json

import pytest

from rlprof_plugins.errors import OptionsError
from rlprof_plugins.profiler_config import ENV, ProfilerConfig, from_environment, parse_profiler_config


def test_defaults_match_vllm_for_the_same_keys():
    cfg = parse_profiler_config("{}")
    assert cfg == ProfilerConfig()
    assert cfg.torch_profiler_with_stack is True and cfg.torch_profiler_record_shapes is False
    settings = cfg.torch_settings(cuda_available=False)
    assert settings.activities == ("CPU",) and settings.use_gzip
    assert cfg.torch_settings(cuda_available=True).activities == ("CPU", "CUDA")


def test_ours_and_torch_keys_together(tmp_path):
    cfg = parse_profiler_config({"profiler": "torch", "torch_profiler_dir": str(tmp_path), "step_start": 2,
                                 "step_end": 6, "by_stage": True, "merge": True, "torch_profiler_activities": ["GPU"],
                                 "torch_profiler_with_stack": False})
    assert cfg.torch_profiler_dir == str(tmp_path) and cfg.torch_profiler_activities == ("CUDA",)
    assert (cfg.options.step_start, cfg.options.step_end, cfg.options.by_stage, cfg.options.merge) == (2, 6, True, True)
    assert parse_profiler_config(cfg.to_json()) == cfg  # what spawned processes read back


def test_request_overrides_win():
    settings = parse_profiler_config({"torch_profiler_with_stack": True}).torch_settings(
        cuda_available=True, overrides={"activities": ("CPU",), "with_stack": False})
    assert settings.activities == ("CPU",) and settings.with_stack is False


@pytest.mark.parametrize("data, key", [
    ('{"step_strat": 1}', "step_strat"),
    ('{"profiler": "cuda"}', "profiler"),
    ('{"torch_profiler_dir": "gs://bucket/x"}', "torch_profiler_dir"),
    ('{"torch_profiler_activities": ["TPU"]}', "torch_profiler_activities"),
    ('{"torch_profiler_with_stack": "yes"}', "torch_profiler_with_stack"),
    ('{"step_start": 4, "step_end": 2}', "step_end"),
    ('{"delay_iterations": 2}', "delay_iterations"),  # vLLM's own window keys: use step_start/step_end
    ("[1]", "(json)"),
    ("{oops", "(json)"),
])
def test_bad_config_names_the_key(data, key):
    with pytest.raises(OptionsError) as e:
        parse_profiler_config(data)
    assert e.value.key == key


def test_typo_gets_a_suggestion():
    with pytest.raises(OptionsError, match="did you mean 'torch_profiler_dir'"):
        parse_profiler_config({"torch_profiler_dri": "/x"})


def test_environment_round_trip(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert from_environment() is None
    monkeypatch.setenv(ENV, json.dumps({"keep_last_steps": 3}))
    assert from_environment().options.keep_last_steps == 3


def test_settings_from_a_config_that_lacks_newer_keys():
    """vLLM 0.13-0.31's ProfilerConfig has no torch_profiler_activities (0.13
    no use_gzip either): those take vLLM 0.32's defaults; request fields win."""
    from types import SimpleNamespace

    from rlprof_plugins.backends.torch_profiler import settings_from_config

    old = SimpleNamespace(torch_profiler_with_stack=False, torch_profiler_record_shapes=True,
                          torch_profiler_with_memory=False, torch_profiler_with_flops=False)
    s = settings_from_config(old, default_activities=("CPU", "CUDA"))
    assert (s.activities, s.with_stack, s.record_shapes, s.use_gzip) == (("CPU", "CUDA"), False, True, True)
    assert s.table_sort_key == "self_device_time_total"
    s = settings_from_config(old, default_activities=("CPU",), overrides={"activities": ("CPU",), "with_stack": True},
                             write_table=True)
    assert (s.activities, s.with_stack, s.write_table, s.table_sort_key) == (("CPU",), True, True, "self_cpu_time_total")
    # rlprof's own config (SGLang, vLLM < 0.13) goes through the same function
    cfg = parse_profiler_config({"torch_profiler_activities": ["GPU"], "torch_profiler_use_gzip": False})
    s = cfg.torch_settings(cuda_available=False)
    assert (s.activities, s.use_gzip, s.with_stack) == (("CUDA",), False, True)
