"""SGLang start bodies (native and rlprof fields) as rlprof requests; no SGLang needed."""

import pytest

from rlprof_plugins.errors import RequestError
from rlprof_plugins.patches.sglang.sessions import uses_rlprof
from rlprof_plugins.patches.sglang.start_requests import build_request
from rlprof_plugins.patches.sglang.wire import decode_command, encode_command
from rlprof_plugins.trace.format.naming import parse_rank_label, rank_order, sglang_rank_label
from rlprof_plugins.config.launch_config import parse_profiler_config


@pytest.fixture
def config(tmp_path):
    return parse_profiler_config({"torch_profiler_dir": str(tmp_path), "step_start": 2, "step_end": 6})


def test_server_defaults_apply(config, tmp_path):
    r = build_request({"global_step": 3}, config)
    assert (r.global_step, r.step_start, r.step_end, r.output_dir) == (3, 2, 6, str(tmp_path))


def test_native_fields_map_onto_ours(config, tmp_path, monkeypatch):
    from rlprof_plugins.backends import which_backend

    monkeypatch.setattr(which_backend, "device_type", lambda: "cuda")  # a GPU host: GPU activities are recordable
    r = build_request({"global_step": 1, "num_steps": 4, "profile_by_stage": True, "merge_profiles": True,
                       "profile_prefix": "p", "activities": ["CPU", "GPU"], "with_stack": False,
                       "record_shapes": True, "profile_id": "run-7", "output_dir": str(tmp_path / "sub")}, config)
    assert (r.step_start, r.step_end) == (2, 6)  # num_steps counts from step_start
    assert r.by_stage and r.merge and r.profile_prefix == "p" and r.session_id == "run-7"
    assert r.torch_overrides == {"activities": ("CPU", "CUDA"), "with_stack": False, "record_shapes": True}
    assert r.output_dir == str((tmp_path / "sub").resolve())


@pytest.mark.parametrize("body, field", [
    ({"start_step": 5, "step_end": 9}, "step_end"),
    ({"profile_stages": ["prefill"]}, "profile_stages"),
    ({"detailed_annotations": True}, "detailed_annotations"),
    ({"num_steps": 2, "step_end": 9}, "num_steps"),
    ({"num_steps": -1}, "num_steps"),
    ({"by_stage": True, "profile_by_stage": False}, "profile_by_stage"),
    ({"activities": ["MEM"]}, "activities"),
    ({"output_dir": "/elsewhere"}, "output_dir"),
    ({"output_dir": "../up"}, "output_dir"),
    ({"profile_id": ""}, "profile_id"),
    ({"profile_prefix": "../../etc/x"}, "profile_prefix"),
    ({"profile_prefix": ".hidden"}, "profile_prefix"),
    ({"global_steps": 1}, "global_steps"),
])
def test_refused_fields_are_named(config, body, field):
    with pytest.raises(RequestError) as e:
        build_request(body, config)
    assert e.value.field == field


def test_device_activities_the_host_lacks_are_refused(config, monkeypatch):
    """slime's body (tools/profile_rollout.py) asks for GPU; on a host without
    CUDA that is a 400 naming ``activities`` before anything starts."""
    from rlprof_plugins.backends import which_backend

    slime = {"output_dir": None, "num_steps": 3, "activities": ["GPU"], "profile_by_stage": False,
             "with_stack": False, "record_shapes": False}
    for device in ("cpu", "xpu"):
        monkeypatch.setattr(which_backend, "device_type", lambda device=device: device)
        with pytest.raises(RequestError) as e:
            build_request({k: v for k, v in slime.items() if v is not None}, config)
        assert e.value.field == "activities" and "CUDA" in e.value.message
    for device in ("cuda", "npu"):  # SGLang maps GPU to the NPU on Ascend
        monkeypatch.setattr(which_backend, "device_type", lambda device=device: device)
        assert build_request({"activities": ["GPU"]}, config).torch_overrides == {"activities": ("CUDA",)}
    monkeypatch.setattr(which_backend, "device_type", lambda: "cpu")
    assert build_request({"activities": ["CPU"]}, config).torch_overrides == {"activities": ("CPU",)}


def test_unconfigured_server_writes_where_sglang_would(monkeypatch, tmp_path):
    monkeypatch.setenv("SGLANG_TORCH_PROFILER_DIR", str(tmp_path))
    assert build_request({"global_step": 0}, None).output_dir == str(tmp_path)
    assert build_request({"global_step": 0, "output_dir": str(tmp_path / "x")}, None).output_dir == str(tmp_path / "x")


def test_which_bodies_are_rlprofs():
    assert uses_rlprof({"global_step": 1}) and uses_rlprof({"step_end": 3})
    assert not uses_rlprof({"output_dir": "/x", "num_steps": 3})


def test_command_channel_round_trip():
    command = {"op": "status", "global_step": 4}
    assert decode_command(encode_command(command)) == command
    assert decode_command("1795353928.61") is None and decode_command(None) is None


def test_rank_names_follow_sglang():
    pos = {"tp": 1, "tp_size": 2, "pp": 1, "pp_size": 2, "dp": 0, "dp_size": 1, "ep": 0, "ep_size": 1}
    assert sglang_rank_label(pos) == "TP-1-PP-1"
    assert sglang_rank_label({**pos, "ep_size": 2, "ep": 1}) == "TP-1-PP-1-EP-1"
    # one name: it parses back to the place, and ranks sort as global ranks count (tp fastest, then pp)
    assert parse_rank_label("TP-1-PP-1") == (None, {"tp": 1, "pp": 1})
    labels = [sglang_rank_label({**pos, "tp": t, "pp": p}) for p in (1, 0) for t in (1, 0)]
    assert sorted(labels, key=lambda label: rank_order(*parse_rank_label(label))) == [
        "TP-0-PP-0", "TP-1-PP-0", "TP-0-PP-1", "TP-1-PP-1"]
