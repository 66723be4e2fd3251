"""docs/compatibility.md is generated from the declarations and the tested
releases; the contract tests (test_releases.py) assert each of its cells."""

from pathlib import Path

from rlprof_plugins.cli.compatibility import CI_SUBSET, TESTED, capabilities, features, markdown
from rlprof_plugins.patches.base import Patch

DOC = Path(__file__).resolve().parents[2] / "docs" / "compatibility.md"


def test_compatibility_doc_matches_the_code():
    assert DOC.read_text() == markdown(), "run: make patch-table"


def test_every_tested_release_is_supported_and_the_ci_subset_is_tested():
    from rlprof_plugins.cli.compatibility import supported

    for engine, versions in TESTED.items():
        assert all(supported(engine, v) for v in versions)
        assert set(CI_SUBSET[engine]) <= set(versions)
        # the newest (installed, served end to end) release is always in CI
        assert versions[-1] in CI_SUBSET[engine]


def _patch(name, versions, feature="windows", area=""):
    return Patch(name=name, engine="vllm", versions=versions, module="m", feature=feature, why="", upstream="",
                 area=area)


def test_a_feature_needs_a_patch_for_each_of_its_areas_on_the_release():
    """Hand-made declarations, so the rule is checked against stated answers,
    not against a second copy of itself: two areas (worker, route), the route
    served by one patch per era."""
    declared = (_patch("worker", ">=0.10,<0.34"),
                _patch("route-env", ">=0.10,<0.13", area="route"), _patch("route", ">=0.13,<0.30", area="route"),
                _patch("other", ">=0.20,<0.34", feature="other"))
    rows = {v: {s.feature: s for s in features("vllm", v, patches=declared)} for v in ("0.12.0", "0.15.0", "0.31.0")}
    assert [rows[v]["windows"].available for v in rows] == [True, True, False]  # 0.31: no route patch
    assert rows["0.12.0"]["windows"].patches == ("worker", "route-env")
    assert rows["0.15.0"]["windows"].patches == ("worker", "route")
    assert "verified for" in rows["0.31.0"]["windows"].reason and ">=0.13,<0.30" in rows["0.31.0"]["windows"].reason
    assert [rows[v]["other"].available for v in rows] == [False, False, True]
    # what a dry run found overrides the declared ranges
    found = features("vllm", "0.15.0", applies=lambda p: p.name != "worker", patches=declared)
    assert not {s.feature: s for s in found}["windows"].available


def test_the_tables_eras_show_in_the_real_declarations():
    for engine, versions in TESTED.items():
        for v in versions:
            assert len(capabilities(engine, v)) >= 2
    # the eras the issue names show in the table
    assert [s.available for s in features("vllm", "0.12.0.post2") if "RLPROF_PROFILER_CONFIG" in s.feature] == [True]
    assert [s.available for s in features("vllm", "0.16.0") if "RLPROF_PROFILER_CONFIG" in s.feature] == [False]
    assert all(s.available for s in features("vllm", "0.32.0") if "RLPROF_PROFILER_CONFIG" not in s.feature)
