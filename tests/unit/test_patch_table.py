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
    # each engine area has a patch for the newest release
    from rlprof_plugins.cli.compatibility import TESTED

    for engine, newest in ((e, releases[-1]) for e, releases in TESTED.items()):
        areas = {p.area_name for p in ALL_PATCHES if p.engine == engine and "env_era" not in p.name}
        covered = {p.area_name for p in ALL_PATCHES if p.engine == engine and p.supports(newest)}
        assert areas <= covered, areas - covered


def test_each_patch_is_named_for_the_engine_and_file_that_hold_it():
    """``<engine folder>.<module>.<what>``: a patch's name says where to find it (docs/patches.md, doctor)."""
    import importlib
    import pkgutil

    import rlprof_plugins.patches as registry

    held = {}
    for folder in ("vllm", "sglang", "vllm_ascend", "verl"):
        package = importlib.import_module(f"{registry.__name__}.{folder}")
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            for patch in getattr(module, "PATCHES", ()):
                held[patch.name] = f"{folder}.{info.name}"
    assert sorted(held) == sorted(p.name for p in ALL_PATCHES)  # every declared patch is in one module
    misnamed = {name: where for name, where in held.items() if not name.startswith(where + ".")}
    assert misnamed == {}
