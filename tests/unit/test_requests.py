"""One request model for both engines (rlprof_plugins.config.requests): every field, one meaning."""

import pytest

from rlprof_plugins.errors import RequestError
from rlprof_plugins.config.options import ProfileOptions
from rlprof_plugins.config.request_fields import ENTRY_POINTS, FIELD_NAMES, FIELDS, field_table
from rlprof_plugins.config.requests import Server, StartRequest, parse_start

DEFAULTS = ProfileOptions(step_start=2, step_end=6)


def server(tmp_path, engine="vllm", defaults=DEFAULTS, device="cpu", **more):
    return Server(engine=engine, defaults=defaults, output_root=str(tmp_path), device=device, **more)


def window(fields, srv):
    r = parse_start(fields, srv)
    return r.step_start, r.step_end


def test_empty_body_uses_server_defaults(tmp_path):
    r = parse_start({}, server(tmp_path))
    assert (r.global_step, r.step_start, r.step_end, r.output_dir, r.start_at) == (None, 2, 6, None, None)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("fields, expected", [
    ({"global_step": 37, "step_start": 0, "step_end": None}, (0, None)),  # rlprof: null = until the stop
    ({"step_start": 3}, (3, 6)),  # rlprof's step_end stays the server's
    ({"step_end": 4}, (2, 4)),
    # vLLM: an unset max_iterations is the configured length (4), as native vLLM reads it
    ({"delay_iterations": 5}, (5, 9)),
    ({"max_iterations": 3}, (2, 5)),
    ({"delay_iterations": 1, "max_iterations": 0}, (1, None)),  # 0: no limit
    # SGLang: num_steps from the start; 0 is unset, as SGLang reads it
    ({"num_steps": 4}, (2, 6)),
    ({"num_steps": 0}, (2, 6)),
    ({"step_start": 1, "num_steps": 2}, (1, 3)),
    ({"start_step": 0, "num_steps": 3}, (2, 5)),
])
def test_each_window_field_means_the_same_on_both_engines(tmp_path, engine, fields, expected):
    assert window(fields, server(tmp_path, engine)) == expected


def test_delay_without_max_uses_the_configured_max_on_every_path(tmp_path):
    """The issue's example: max_iterations 5 configured, a request with
    delay_iterations 2 records 5 iterations from 2 (vLLM's own meaning),
    wherever the request arrives (they all call parse_start)."""
    configured = ProfileOptions(step_start=0, step_end=5)  # options_of({"max_iterations": 5})
    assert window({"delay_iterations": 2}, server(tmp_path, defaults=configured)) == (2, 7)
    assert window({"delay_iterations": 2, "max_iterations": None}, server(tmp_path, defaults=configured)) == (2, 7)


def test_start_step_is_an_absolute_forward_count(tmp_path):
    r = parse_start({"start_step": 10, "num_steps": 3}, server(tmp_path, "sglang"))
    assert (r.step_start, r.step_end, r.start_at) == (0, 3, 10)
    command = r.to_command()

    def at(command, forwards_done):  # the request as a worker that ran that many passes reads it back
        return StartRequest.from_command(command, forwards_done)

    # SGLang's rule: recording begins with forward pass 10 (or the next one when 10 is past)
    assert at(command, forwards_done=4).step_start == 5
    assert (at(command, 4).step_end, at(command, 4).start_at) == (8, None)
    assert (at(command, 9).step_start, at(command, 9).step_end) == (0, 3)
    assert (at(command, 50).step_start, at(command, 50).step_end) == (0, 3)
    until_stop = parse_start({"start_step": 10, "max_iterations": 0}, server(tmp_path)).to_command()
    assert (at(until_stop, 4).step_start, at(until_stop, 4).step_end) == (5, None)
    plain = parse_start({}, server(tmp_path))
    assert at(plain.to_command(), 100) == plain  # no start_at: read back unchanged


@pytest.mark.parametrize("fields, field", [
    ({"global_step": -1}, "global_step"),
    ({"global_step": "3"}, "global_step"),
    ({"global_step": 2.0}, "global_step"),
    ({"global_step": True}, "global_step"),
    ({"step_start": 7}, "step_end"),  # 7 >= the server's step_end 6
    ({"step_end": 1}, "step_end"),  # 1 <= the server's step_start 2
    ({"global_stpe": 3}, "global_stpe"),
    ({"profile_prefix": 5}, "profile_prefix"),
    ({"step_start": 1, "delay_iterations": 1}, "delay_iterations"),
    ({"delay_iterations": 1, "start_step": 4}, "start_step"),
    ({"num_steps": 2, "step_end": 9}, "num_steps"),
    ({"max_iterations": 2, "num_steps": 3}, "num_steps"),
    ({"start_step": 4, "step_end": 9}, "step_end"),
    ({"num_steps": -1}, "num_steps"),
    ({"delay_iterations": "2"}, "delay_iterations"),
    ({"profile_stages": ["prefill"]}, "profile_stages"),
    ({"detailed_annotations": True}, "detailed_annotations"),
    ({"by_stage": True, "profile_by_stage": False}, "profile_by_stage"),
    ({"by_stage": "on"}, "by_stage"),
    ({"activities": ["MEM"]}, "activities"),
    ({"activities": ["GPU"]}, "activities"),  # this host (device "cpu") has no CUDA
    ({"with_stack": True, "profiler_kwargs": {"with_stack": False}}, "with_stack"),
    ({"profiler_kwargs": {"schedule": 1}}, "profiler_kwargs.schedule"),
    ({"profile_id": ""}, "profile_id"),
    ({"output_dir": 3}, "output_dir"),
])
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_bad_fields_are_named_on_both_engines(tmp_path, engine, fields, field):
    with pytest.raises(RequestError) as e:
        parse_start(fields, server(tmp_path, engine))
    assert e.value.field == field
    assert e.value.to_json()["error"]["field"] == field


def test_unknown_field_suggests_the_close_one(tmp_path):
    with pytest.raises(RequestError) as e:
        parse_start({"global_stpe": 3}, server(tmp_path))
    assert "did you mean 'global_step'" in e.value.message and e.value.field == "global_stpe"


def test_a_field_no_one_defines_is_ignored_as_the_engines_routes_ignore_it(tmp_path):
    """A completion request sent to /start_profile: vLLM's and SGLang's routes drop the fields they do not
    define and start a profile; so does rlprof, and its answer names what it ignored."""
    request = parse_start({"model": "m", "prompt": "p", "max_tokens": 16, "stream": False}, server(tmp_path))
    assert request.global_step is None
    assert request.warnings == ("unknown field 'model' ignored", "unknown field 'prompt' ignored",
                                "unknown field 'max_tokens' ignored", "unknown field 'stream' ignored")


def test_body_must_be_an_object(tmp_path):
    with pytest.raises(RequestError) as e:
        parse_start([1, 2], server(tmp_path))
    assert e.value.field == "body"


def test_sglang_fields_on_vllm(tmp_path, monkeypatch):
    """vime's earlier body (slime's, sent to vLLM) has a meaning on vLLM too."""
    r = parse_start({"output_dir": str(tmp_path / "sub"), "num_steps": 3, "activities": ["CPU"],
                     "profile_by_stage": True, "with_stack": False, "record_shapes": True, "merge_profiles": True,
                     "profile_id": "run-7", "profile_prefix": "p"}, server(tmp_path))
    assert (r.step_start, r.step_end, r.by_stage, r.merge, r.session_id, r.profile_prefix) == (2, 5, True, True,
                                                                                               "run-7", "p")
    assert r.torch_overrides == {"activities": ("CPU",), "with_stack": False, "record_shapes": True}
    assert r.output_dir == str((tmp_path / "sub").resolve()) and r.warnings == ()


def test_output_dir_outside_the_allowed_directories(tmp_path):
    elsewhere = str(tmp_path.parent / "sglang_profile")
    # vLLM ignores the field natively: files go where they would have gone, with a warning
    r = parse_start({"output_dir": elsewhere}, server(tmp_path, "vllm"))
    assert r.output_dir is None and "output_dir" in r.warnings[0] and "allowed_output_dirs" in r.warnings[0]
    # SGLang's own field: refused, naming the key that allows more
    with pytest.raises(RequestError) as e:
        parse_start({"output_dir": elsewhere}, server(tmp_path, "sglang"))
    assert e.value.field == "output_dir" and "allowed_output_dirs" in e.value.message
    with pytest.raises(RequestError):
        parse_start({"output_dir": str(tmp_path / ".." / "x")}, server(tmp_path, "sglang"))
    allowing = ProfileOptions(allowed_output_dirs=(elsewhere,))
    for engine in ("vllm", "sglang"):
        r = parse_start({"output_dir": elsewhere + "/run1"}, server(tmp_path, engine, defaults=allowing))
        assert r.output_dir == elsewhere + "/run1" and not r.warnings


def test_device_activities_follow_the_host(tmp_path):
    for device in ("cuda", "npu"):  # SGLang maps GPU onto the NPU on Ascend
        r = parse_start({"activities": ["GPU"]}, server(tmp_path, device=device))
        assert r.torch_overrides == {"activities": ("CUDA",)}
    with pytest.raises(RequestError) as e:
        parse_start({"activities": ["CPU", "GPU"]}, server(tmp_path, device="xpu"))
    assert e.value.field == "activities" and "CUDA" in e.value.message


def test_engine_prefix_rule(tmp_path):
    def vllm_rule(prefix):
        if not prefix[0].isalnum():
            raise ValueError("profile_prefix must start with a letter or number")

    with pytest.raises(RequestError) as e:
        parse_start({"profile_prefix": "_x"}, server(tmp_path, check_prefix=vllm_rule))
    assert e.value.field == "profile_prefix" and "letter" in e.value.message
    for bad in ("../../etc/x", ".hidden", ""):
        with pytest.raises(RequestError):
            parse_start({"profile_prefix": bad}, server(tmp_path, "sglang"))


def test_command_round_trip(tmp_path):
    srv = server(tmp_path, defaults=ProfileOptions(operator_table=True, keep_last_steps=3, merge=True))
    cmd = parse_start({"global_step": 5, "step_end": 3, "profile_prefix": "p", "by_stage": True}, srv).to_command()
    assert len(cmd.pop("session_id")) == 12
    assert cmd == {"op": "start", "global_step": 5, "step_start": 0, "step_end": 3, "profile_prefix": "p",
                   "by_stage": True, "operator_table": True, "keep_last_steps": 3, "merge": True,
                   "chunk_iterations": 0, "max_pause_ms": 200, "max_recording_mb": 1024, "output_dir": None, "torch_overrides": None,
                   "trace": True, "backend": None, "memory": False, "memory_stacks": "python",
                   "memory_max_entries": 100000, "start_at": None, "step_source": "request"}


def test_chunk_iterations_from_the_request_or_the_server(tmp_path):
    assert parse_start({}, server(tmp_path, defaults=ProfileOptions(chunk_iterations=8))).chunk_iterations == 8
    assert parse_start({"chunk_iterations": 3}, server(tmp_path)).chunk_iterations == 3
    assert parse_start({"chunk_iterations": 0}, server(tmp_path, defaults=ProfileOptions(chunk_iterations=8))
                       ).chunk_iterations == 0
    # torch's operator table is built from one torch session: no chunks with it
    table = ProfileOptions(operator_table=True, chunk_iterations=8)
    assert parse_start({"chunk_iterations": 3}, server(tmp_path, defaults=table)).chunk_iterations == 0
    with pytest.raises(RequestError) as e:
        parse_start({"chunk_iterations": -1}, server(tmp_path))
    assert e.value.field == "chunk_iterations"


def test_field_table_covers_every_field_and_entry_point():
    table = field_table()
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == list(FIELD_NAMES)
    assert all(row.count("|") == 3 + len(ENTRY_POINTS) for row in rows)
    engine_row = next(row for row in rows if row.startswith("| `global_step`"))
    assert engine_row.split("|")[5].strip() == "—"  # LLMEngine takes vLLM's fields only
    assert all(f"- `{f.name}` ({f.kind}): " in table for f in FIELDS)  # every field's meaning below the table
    refused = [f.name for f in FIELDS if f.refused]
    assert all("400" in next(r for r in rows if r.startswith(f"| `{name}`")) for name in refused)


def test_docs_table_is_generated_from_the_declarations():
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
    block = docs.split("<!-- request-fields:start -->\n")[1].split("<!-- request-fields:end -->")[0]
    assert block == field_table(), "regenerate: make patch-table"


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_trainer_step_fills_an_unnamed_global_step(tmp_path, engine):
    """verl's integration (rlprof_plugins.step_sources.trainer): the weights version + the offset,
    the caller's own step first, nothing without a sync, and only inside the call."""
    from rlprof_plugins.step_sources import trainer as trainer_step
    from rlprof_plugins.step_sources.trainer import TrainerStep

    srv = server(tmp_path, engine)
    with trainer_step.given(TrainerStep("verl", weights_version=4)):
        assert parse_start({}, srv).global_step == 5
        assert parse_start({"global_step": 9}, srv).global_step == 9  # a step in the request wins
        offset0 = server(tmp_path, engine, defaults=ProfileOptions(trainer_step_offset=0))
        assert parse_start({}, offset0).global_step == 4
    with trainer_step.given(TrainerStep("verl", global_step=7, weights_version=4)):
        assert parse_start({}, srv).global_step == 7
    with trainer_step.given(TrainerStep("verl")):
        assert not trainer_step.active()
        assert parse_start({}, srv).global_step is None
    assert parse_start({}, srv).global_step is None  # outside the call: as before


@pytest.mark.parametrize("engine, fields, only", [
    ("vllm", {}, True),
    ("vllm", {"profile_prefix": "run", "delay_iterations": 2, "max_iterations": 3}, True),
    ("vllm", {"global_step": 3}, False),  # rlprof's
    ("vllm", {"num_steps": 3}, False),  # SGLang's, not vLLM's
    ("sglang", {"start_step": 4, "num_steps": 3, "with_stack": False, "output_dir": None}, True),
    ("sglang", {"step_end": 5}, False),
    ("vllm", {"model": "m", "prompt": "p"}, True),  # fields no one defines are ignored, as the routes ignore them
])
def test_a_request_knows_whether_it_gave_only_the_engines_own_fields(tmp_path, engine, fields, only):
    """What decides whether a second start is the engine's answer (200, ignored) or rlprof's 409."""
    assert parse_start(fields, server(tmp_path, engine)).engine_fields_only is only
