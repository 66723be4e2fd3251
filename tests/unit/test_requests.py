import pytest

from rlprof_plugins.errors import RequestError
from rlprof_plugins.options import ProfileOptions
from rlprof_plugins.requests import build_start_request, parse_start_body

NATIVE = ("profile_prefix", "delay_iterations", "max_iterations")
DEFAULTS = ProfileOptions(step_start=2, step_end=6)


def test_empty_body_uses_server_defaults():
    req, native = parse_start_body({}, DEFAULTS, NATIVE)
    assert (req.global_step, req.step_start, req.step_end) == (None, 2, 6)
    assert native == {}


def test_overrides_and_explicit_null_step_end():
    req, _ = parse_start_body({"global_step": 37, "step_start": 0, "step_end": None}, DEFAULTS, NATIVE)
    assert (req.global_step, req.step_start, req.step_end) == (37, 0, None)


@pytest.mark.parametrize(
    "body, field",
    [
        ({"global_step": -1}, "global_step"),
        ({"global_step": "3"}, "global_step"),
        ({"global_step": "../../etc"}, "global_step"),
        ({"global_step": 2.0}, "global_step"),
        ({"global_step": True}, "global_step"),
        ({"step_start": 7}, "step_end"),  # 7 >= default step_end 6
        ({"step_end": 1}, "step_end"),  # 1 <= default step_start 2
        ({"global_stpe": 3}, "global_stpe"),
        ({"profile_prefix": 5}, "profile_prefix"),
    ],
)
def test_bad_bodies_name_the_field(body, field):
    with pytest.raises(RequestError) as e:
        parse_start_body(body, DEFAULTS, NATIVE)
    assert e.value.field == field
    assert e.value.to_json()["error"]["field"] == field


def test_body_must_be_an_object():
    with pytest.raises(RequestError) as e:
        parse_start_body([1, 2], DEFAULTS, NATIVE)
    assert e.value.field == "body"


def test_command_round_trip():
    req = build_start_request(ProfileOptions(operator_table=True, keep_last_steps=3, merge=True), global_step=5, step_end=3,
                              profile_prefix="p", by_stage=True)
    cmd = req.to_command()
    assert len(cmd.pop("session_id")) == 12
    assert cmd == {"op": "start", "global_step": 5, "step_start": 0, "step_end": 3, "profile_prefix": "p",
                   "by_stage": True, "operator_table": True, "keep_last_steps": 3, "merge": True,
                   "output_dir": None, "torch_overrides": None}


def test_by_stage_request_override():
    req, _ = parse_start_body({"by_stage": True}, ProfileOptions(), NATIVE)
    assert req.by_stage
    with pytest.raises(RequestError) as e:
        parse_start_body({"by_stage": "on"}, ProfileOptions(), NATIVE)
    assert e.value.field == "by_stage"
