"""``step_source: weight_version`` (issue 34): the global step from the engine's weight version.

The rule (``steps.weight_version``, ``steps.which_step``) and ``parse_start`` on
both engines' servers: the request's own step first, then a trainer
integration's, then the version + ``trainer_step_offset``; a version that is
no integer or a step below 0 gives the default folder and a warning; the
source is named for the status and the manifest. vLLM's start-up check by
release. The engines' own readers run on the real servers (tests/e2e) and on
each release's modules (tests/compat).
"""

import pytest

from rlprof_plugins.config.options import ProfileOptions, parse_options
from rlprof_plugins.config.requests import parse_start
from rlprof_plugins.errors import OptionsError, RequestError
from rlprof_plugins.step_sources import trainer as trainer_step
from rlprof_plugins.step_sources.trainer import TrainerStep
from rlprof_plugins.step_sources.weight_version import as_integer, step_of
from tests.unit.test_requests import server

SLIME = ProfileOptions(step_source="weight_version", trainer_step_offset=-1)


def versioned(tmp_path, engine, version, defaults=SLIME):
    reads = []

    def read():
        reads.append(version)
        return version

    return server(tmp_path, engine, defaults=defaults, weight_version=read), reads


def test_the_options_and_their_defaults():
    assert (ProfileOptions().step_source, ProfileOptions().trainer_step_offset) == ("request", 1)
    options = parse_options({"step_source": "weight_version", "trainer_step_offset": -1})
    assert (options.step_source, options.trainer_step_offset) == ("weight_version", -1)


@pytest.mark.parametrize("version, number", [("4", 4), (" 12 ", 12), (3, 3), ("-2", -2), ("default", None),
                                             ("v4", None), ("4.0", None), (4.0, None), (True, None), (None, None),
                                             ("a1b2c3", None)])
def test_only_integers_are_versions_of_a_step(version, number):
    assert as_integer(version) == number


def test_the_step_and_where_it_came_from():
    assert step_of("4", 1) == step_of(4, 1)
    found = step_of("4", 1)
    assert (found.global_step, found.source, found.warning) == (5, "weight_version 4 + offset 1", None)
    default = step_of("default", -1)
    assert default.global_step is None and "'default' is not an integer" in default.warning
    below = step_of("0", -1)
    assert below.global_step is None and "= -1, below 0" in below.warning


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_start_without_a_step_takes_the_engines_version(tmp_path, engine):
    srv, reads = versioned(tmp_path, engine, "7")
    request = parse_start({}, srv)
    assert (request.global_step, request.step_source, request.warnings) == (6, "weight_version 7 + offset -1", ())
    assert reads == ["7"]  # read once, at the start
    assert request.to_command()["step_source"] == "weight_version 7 + offset -1"  # what the workers record


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_requests_own_step_wins_and_the_version_is_not_read(tmp_path, engine):
    srv, reads = versioned(tmp_path, engine, "7")
    request = parse_start({"global_step": 40}, srv)
    assert (request.global_step, request.step_source, reads) == (40, "request", [])
    with pytest.raises(RequestError) as e:
        parse_start({"global_step": "x"}, srv)
    assert e.value.field == "global_step"


def test_a_trainer_integrations_step_comes_before_the_version(tmp_path):
    srv, reads = versioned(tmp_path, "sglang", "7")
    with trainer_step.given(TrainerStep("verl", weights_version=2)):
        request = parse_start({}, srv)
    assert (request.global_step, request.step_source, reads) == (1, "verl weights version 2 + offset -1", [])


@pytest.mark.parametrize("version, fragment", [("default", "'default' is not an integer"), ("0", "below 0")])
def test_a_version_that_gives_no_step_writes_the_default_folder_and_says_why(tmp_path, version, fragment):
    srv, _ = versioned(tmp_path, "sglang", version)
    request = parse_start({}, srv)
    assert request.global_step is None and request.step_source is None
    assert len(request.warnings) == 1 and fragment in request.warnings[0]


def test_step_source_request_ignores_the_version(tmp_path):
    srv, reads = versioned(tmp_path, "vllm", "7", defaults=ProfileOptions(trainer_step_offset=-1))
    request = parse_start({}, srv)
    assert (request.global_step, request.step_source, request.warnings, reads) == (None, None, (), [])


def test_an_engine_without_a_version_says_so(tmp_path):
    request = parse_start({}, server(tmp_path, "vllm", defaults=SLIME))
    assert request.global_step is None and "keeps no weight version" in request.warnings[0]


def test_vllm_releases_without_a_weight_version_refuse_the_option_at_start_up():
    from rlprof_plugins.patches.vllm.weight_reader import check_release

    check_release(SLIME, "0.32.0")
    check_release(SLIME, "0.33.0")
    check_release(ProfileOptions(), "0.24.0")  # the default source needs nothing
    with pytest.raises(OptionsError) as e:
        check_release(SLIME, "0.24.0")
    assert e.value.key == "step_source" and "vLLM 0.24.0 keeps none" in e.value.message


# ---- step_source profile_prefix (issue 36): frontends that forward a prefix and nothing else ----------
PREFIXED = ProfileOptions(step_source="profile_prefix")


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("prefix, step", [("global_step_37", 37), ("global_step_0", 0),
                                          ("global_step_12.decode", 12), ("global_step_3-run2", 3),
                                          ("global_step_4_retry", 4)])
def test_a_prefix_that_names_a_step_records_into_it_and_keeps_the_name(tmp_path, engine, prefix, step):
    request = parse_start({"profile_prefix": prefix}, server(tmp_path, engine, defaults=PREFIXED))
    assert (request.global_step, request.step_source, request.profile_prefix) == (step, f"profile_prefix {prefix}",
                                                                                  prefix)
    assert not request.warnings


@pytest.mark.parametrize("prefix", ["rollout", "global_step_", "global_stepx", "global_step_3x", "step_3", None])
def test_a_prefix_that_names_no_step_gives_the_default_folder_and_says_so(tmp_path, prefix):
    fields = {"profile_prefix": prefix} if prefix is not None else {}
    request = parse_start(fields, server(tmp_path, "sglang", defaults=PREFIXED))
    assert request.global_step is None and request.step_source is None
    assert request.warnings and "names no step (global_step_<N>)" in request.warnings[0]


def test_the_request_s_own_step_wins_and_the_source_is_opt_in(tmp_path):
    request = parse_start({"profile_prefix": "global_step_5", "global_step": 9},
                          server(tmp_path, "vllm", defaults=PREFIXED))
    assert (request.global_step, request.step_source) == (9, "request")
    plain = parse_start({"profile_prefix": "global_step_5"}, server(tmp_path, "vllm"))
    assert plain.global_step is None and not plain.warnings  # without the option a prefix is only a name
    assert parse_options({"step_source": "profile_prefix"}).step_source == "profile_prefix"
    with pytest.raises(OptionsError) as e:
        parse_options({"step_source": "prefix"})
    assert e.value.key == "step_source"
