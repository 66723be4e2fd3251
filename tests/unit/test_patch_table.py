"""docs/patches.md is generated from the patch declarations; it must not drift."""

from pathlib import Path

from rlprof_plugins.patches import ALL_PATCHES, markdown_table

DOC = Path(__file__).resolve().parents[2] / "docs" / "patches.md"


def test_patch_table_matches_declarations():
    assert DOC.read_text() == markdown_table(), "run: python -m rlprof_plugins.patches > docs/patches.md"


def test_every_patch_declares_versions_targets_and_why():
    names = set()
    for p in ALL_PATCHES:
        assert p.name not in names
        names.add(p.name)
        assert p.versions and p.targets and p.why and p.upstream and p.feature
        assert p.supports("0.32.0") or p.engine != "vllm"
