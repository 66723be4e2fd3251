"""``--profiler-config`` for SGLang: the same JSON keys and defaults as vLLM's."""

import json

import pytest

from rlprof_plugins.errors import OptionsError
from rlprof_plugins.config.launch_config import ENV, ProfilerConfig, from_environment, parse_profiler_config


def test_defaults_match_vllm_for_the_same_keys():
    """vLLM's defaults for the same keys, but for stacks: a JSON that writes no stack key records sampled
    stacks (torch's tracer off); writing torch_profiler_with_stack gives vLLM's meaning."""
    cfg = parse_profiler_config("{}")
    assert cfg.torch_profiler_with_stack is False and cfg.options.backend_keys["python_stacks"] == "sampled"
    assert cfg.torch_profiler_record_shapes is False
    written = parse_profiler_config({"torch_profiler_with_stack": True})
    assert written == ProfilerConfig() and written.torch_profiler_with_stack is True
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
    ('{"profiler": "nsys"}', "profiler"),
    ('{"profiler": "cuda", "backend": "npu"}', "backend"),
    ('{"torch_profiler_dir": "abfs://container/x"}', "torch_profiler_dir"),  # adlfs: in no extra
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
    cfg = parse_profiler_config({"torch_profiler_activities": ["GPU"], "torch_profiler_use_gzip": False,
                                 "torch_profiler_with_stack": True})
    s = cfg.torch_settings(cuda_available=False)
    assert (s.activities, s.use_gzip, s.with_stack) == (("CUDA",), False, True)


def test_user_overlay_merges_and_refuses_a_key_set_twice_differently(monkeypatch, tmp_path):
    from rlprof_plugins.config import launch_config as profiler_config
    from rlprof_plugins.config.launch_config import merge_over, user_overlay

    monkeypatch.setattr(profiler_config, "_exported", None)
    monkeypatch.delenv(ENV, raising=False)
    assert user_overlay() == {}
    monkeypatch.setenv(ENV, json.dumps({"by_stage": True, "step_start": 2}))
    assert merge_over({"step_start": 2, "torch_profiler_dir": "/t"}, user_overlay(), "--profiler-config") == {
        "by_stage": True, "step_start": 2, "torch_profiler_dir": "/t"}
    with pytest.raises(OptionsError) as e:
        merge_over({"step_start": 3}, user_overlay(), "--profiler-config")
    assert e.value.key == "step_start" and ENV in e.value.message
    monkeypatch.setenv(ENV, "{not json")
    with pytest.raises(OptionsError) as e:
        user_overlay()
    assert e.value.key == f"${ENV}"
    # what this process exported for its own children is not a user's overlay
    profiler_config.export_to_environment(parse_profiler_config({"torch_profiler_dir": str(tmp_path)}))
    assert user_overlay() == {}


def test_sglang_flag_and_environment_merge(monkeypatch, tmp_path):
    import argparse

    from rlprof_plugins.config import launch_config as profiler_config
    from rlprof_plugins.patches.sglang import server_args as sglang_server_args

    monkeypatch.setattr(profiler_config, "_exported", None)
    flag = json.dumps({"torch_profiler_dir": str(tmp_path), "step_start": 1})
    monkeypatch.setenv(ENV, json.dumps({"by_stage": True}))
    seen = []
    namespace = argparse.Namespace(**{sglang_server_args.DEST: flag, "device": "cpu"})
    sglang_server_args._from_cli_args(lambda ns: seen.append(from_environment()), None, (namespace,), {})
    assert (seen[0].options.step_start, seen[0].options.by_stage) == (1, True)
    monkeypatch.setattr(profiler_config, "_exported", None)
    monkeypatch.setenv(ENV, json.dumps({"step_start": 4}))
    with pytest.raises(SystemExit) as e:
        sglang_server_args._from_cli_args(lambda ns: None, None, (namespace,), {})
    assert "step_start" in str(e.value)
