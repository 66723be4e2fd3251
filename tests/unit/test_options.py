import pytest

from rlprof_plugins.errors import OptionsError
from rlprof_plugins.config.options import OUR_KEYS, ProfileOptions, parse_options, split_options

NATIVE = ["profiler", "torch_profiler_dir", "torch_profiler_with_stack", "delay_iterations", "max_iterations"]


def test_defaults_record_until_stop():
    assert parse_options({}) == ProfileOptions(step_start=0, step_end=None)
    assert OUR_KEYS == ("step_start", "step_end", "by_stage", "operator_table", "keep_last_steps", "merge",
                        "routes_require_api_key", "stop_wait_seconds", "chunk_iterations", "max_pause_ms", "max_recording_mb", "output_dir", "allowed_output_dirs", "trainer_step_offset", "step_source", "memory", "memory_stacks",
                        "memory_max_entries", "step_metrics", "flight_recorder", "server_name", "backend", "python_stacks", "sample_hz",
                        "npu_profiler_level", "npu_aic_metrics",
                        "npu_export_type", "npu_data_simplification", "npu_with_modules", "npu_with_stack",
                        "npu_with_memory", "npu_record_shapes", "npu_analyse")
    d = ProfileOptions()
    assert (d.by_stage, d.operator_table, d.keep_last_steps, d.merge, d.routes_require_api_key, d.stop_wait_seconds,
            d.step_metrics) == (False, False, None, False, True, 120, True)


def test_split_keeps_native_and_ours_apart():
    native, ours = split_options({"profiler": "torch", "step_start": 2, "step_end": 6}, NATIVE)
    assert native == {"profiler": "torch"}
    assert ours == {"step_start": 2, "step_end": 6}


def test_typo_is_rejected_with_suggestion():
    with pytest.raises(OptionsError) as e:
        split_options({"profiler": "torch", "step_strat": 2}, NATIVE)
    assert e.value.key == "step_strat"
    assert "did you mean 'step_start'" in str(e.value)


@pytest.mark.parametrize(
    "data, key, fragment",
    [
        ({"step_start": -1}, "step_start", ">= 0"),
        ({"step_start": "2"}, "step_start", "integer"),
        ({"step_start": True}, "step_start", "integer"),
        ({"step_start": 1.5}, "step_start", "integer"),
        ({"step_end": -3}, "step_end", ">= 0"),
        ({"step_start": 4, "step_end": 4}, "step_end", "greater than step_start"),
        ({"step_start": 5, "step_end": 2}, "step_end", "greater than step_start"),
        ({"by_stage": "yes"}, "by_stage", "true or false"),
        ({"operator_table": 1}, "operator_table", "true or false"),
        ({"keep_last_steps": 0}, "keep_last_steps", ">= 1"),
        ({"keep_last_steps": -1}, "keep_last_steps", ">= 0"),
        ({"routes_require_api_key": None}, "routes_require_api_key", "true or false"),
        ({"allowed_output_dirs": "/tmp/x"}, "allowed_output_dirs", "list of directory paths"),
        ({"allowed_output_dirs": ["nosuchscheme://bucket"]}, "allowed_output_dirs", "no library for nosuchscheme://"),
        ({"trainer_step_offset": 1.5}, "trainer_step_offset", "integer"),
        ({"trainer_step_offset": "1"}, "trainer_step_offset", "integer"),
        ({"trainer_step_offset": True}, "trainer_step_offset", "integer"),
        ({"step_source": "weights"}, "step_source", "request, weight_version"),
        ({"step_source": None}, "step_source", "request, weight_version"),
    ],
)
def test_invalid_values_name_the_key(data, key, fragment):
    with pytest.raises(OptionsError) as e:
        parse_options(data)
    assert e.value.key == key
    assert fragment in e.value.message


def test_allowed_output_dirs_are_absolute(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert parse_options({"allowed_output_dirs": ["rel", "/abs"]}).allowed_output_dirs == (str(tmp_path / "rel"), "/abs")
    assert parse_options({}).allowed_output_dirs == ()


def test_valid_window():
    assert parse_options({"step_start": 2, "step_end": 6}) == ProfileOptions(2, 6)
    assert parse_options({"step_end": None}) == ProfileOptions(0, None)


def test_merge_must_be_a_flag():
    assert parse_options({"merge": True}).merge is True
    with pytest.raises(OptionsError, match="merge"):
        parse_options({"merge": "yes"})


def test_backend_and_npu_keys_are_ours_and_validated():
    native, ours = split_options({"backend": "auto", "npu_profiler_level": "Level1"}, NATIVE)
    assert native == {} and parse_options(ours).backend_keys["npu_profiler_level"] == "Level1"
    with pytest.raises(OptionsError) as e:
        parse_options({"npu_profiler_level": True})
    assert e.value.key == "npu_profiler_level"
