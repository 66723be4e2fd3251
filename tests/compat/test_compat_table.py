"""docs/compatibility.md is generated from the declarations and the tested
releases; the contract tests (test_releases.py) assert each of its cells."""

from pathlib import Path

from rlprof_plugins.compat import CI_SUBSET, TESTED, capabilities, features, markdown
from rlprof_plugins.patches import ALL_PATCHES

DOC = Path(__file__).resolve().parents[2] / "docs" / "compatibility.md"


def test_compatibility_doc_matches_the_code():
    assert DOC.read_text() == markdown(), "run: make patch-table"


def test_every_tested_release_is_supported_and_the_ci_subset_is_tested():
    from rlprof_plugins.compat import supported

    for engine, versions in TESTED.items():
        assert all(supported(engine, v) for v in versions)
        assert set(CI_SUBSET[engine]) <= set(versions)
        # the newest (installed, served end to end) release is always in CI
        assert versions[-1] in CI_SUBSET[engine]


def test_feature_rows_follow_the_patch_ranges():
    # a feature is available iff each of its areas has a patch for the release
    for engine, versions in TESTED.items():
        for v in versions:
            for status in features(engine, v):
                serving = [p for p in ALL_PATCHES if p.engine == engine and p.feature == status.feature]
                areas = {p.area_name for p in serving}
                covered = {p.area_name for p in serving if p.supports(v)}
                assert status.available == (areas == covered), (engine, v, status)
            assert len(capabilities(engine, v)) >= 2
    # the eras the issue names show in the table
    assert [s.available for s in features("vllm", "0.12.0.post2") if "RLPROF_PROFILER_CONFIG" in s.feature] == [True]
    assert [s.available for s in features("vllm", "0.16.0") if "RLPROF_PROFILER_CONFIG" in s.feature] == [False]
