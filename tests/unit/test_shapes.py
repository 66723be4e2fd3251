"""The shape rule's parts without an engine: how a target is described, which
releases the rule covers, and that every tested release has its record.
(The rule on a real untested release: tests/compat/test_untested_release.py.)"""

from __future__ import annotations

import dataclasses
import functools
import json
import types

import pytest

from rlprof_plugins.cli.compatibility import TESTED
from rlprof_plugins.patches import ALL_PATCHES, shapes
from rlprof_plugins.patches.engines import tested_releases as releases_of
from rlprof_plugins.patches.base import Patch


def test_signature_text_keeps_names_kinds_and_defaults_only():
    def f(a, b: int = 1, /, c=None, *args, d, e: str = "x", **kw) -> None: ...

    assert shapes.signature_text(f) == "(a, b=, /, c=, *args, d, e=, **kw)"

    def g(self, is_start: bool = True, profile_prefix=None, *, delay_iterations=None): ...

    assert shapes.signature_text(g) == "(self, is_start=, profile_prefix=, *, delay_iterations=)"

    @functools.wraps(g)
    def decorated(*args, **kwargs): ...

    assert shapes.signature_text(decorated) == shapes.signature_text(g)  # through functools.wraps


def _module_with(cls):
    module = types.ModuleType("fake_engine")
    module.Worker = cls
    return module


def _patch(**more) -> Patch:
    return Patch(name="fake.worker", engine="vllm", versions=">=0.1,<0.2", module="fake_engine", feature="f",
                 why="w", upstream="u", wrap={"Worker.profile": lambda w, i, a, k: w(*a, **k)},
                 add={"Worker.extra": 1}, **more)


def test_current_looks_through_rlprofs_own_wrappers_and_additions():
    class Worker:
        def profile(self, is_start=True, profile_prefix=None): ...

    patch = _patch(relies_on={"Worker": "fields:rank,missing"})
    module = _module_with(dataclasses.dataclass(type("Worker", (Worker,), {"__annotations__": {"rank": int}})))
    before = shapes.current(patch, module)
    assert before == {"Worker.profile": "(self, is_start=, profile_prefix=)", "Worker.extra": "absent",
                      "Worker": "has rank; lacks missing"}
    patch.apply(module)
    try:
        assert shapes.current(patch, module) == before
    finally:
        patch.revert()


def test_changes_name_each_target_that_moved(monkeypatch):
    class Worker:
        def profile(self, mode, is_start=True, profile_prefix=None): ...

    patch = _patch()
    record = {"fake.worker": {"Worker.profile": "(self, is_start=, profile_prefix=)", "Worker.extra": "absent"}}
    monkeypatch.setattr(shapes, "recorded", lambda engine, release: record)
    assert shapes.changes(patch, _module_with(Worker), "0.1.0") == [
        "Worker.profile: (self, is_start=, profile_prefix=) -> (self, mode, is_start=, profile_prefix=)"]
    monkeypatch.setattr(shapes, "recorded", lambda engine, release: {})
    assert shapes.changes(patch, _module_with(Worker), "0.1.0") == ["no shape of fake.worker is recorded for vllm 0.1.0"]


def test_the_rule_covers_newer_releases_of_the_same_major_unless_strict(monkeypatch):
    monkeypatch.delenv(shapes.STRICT_ENV, raising=False)
    newest = TESTED["vllm"][-1]
    vllm = releases_of("vllm")  # the registry's: what install_on_import reads from the facts
    assert shapes.newest_tested(vllm) == newest
    assert shapes.untested_newer(vllm, "0.34.0") == newest
    assert shapes.untested_newer(vllm, "0.40.1+cpu") == newest
    assert shapes.untested_newer(vllm, newest) is None  # tested
    assert shapes.untested_newer(vllm, "0.10.2") is None  # older
    assert shapes.untested_newer(vllm, "1.0.0") is None  # another major
    assert shapes.untested_newer(vllm, "not-a-version") is None
    assert shapes.untested_newer(releases_of("vllm-ascend"), "9.9") is None  # no tested list: declared ranges only
    worker = next(p for p in ALL_PATCHES if p.name == "vllm.worker.profile")
    env_era = next(p for p in ALL_PATCHES if p.name == "vllm.profiler_config.env_era")
    assert (worker.covers(newest, vllm), worker.covers("0.34.0", vllm), env_era.covers("0.34.0", vllm)) == (
        "declared", "shape", None)
    assert worker.covers("0.34.0") is None  # without the engine's tested releases: its declared range only
    monkeypatch.setenv(shapes.STRICT_ENV, "1")
    assert shapes.untested_newer(vllm, "0.34.0") is None and worker.covers("0.34.0", vllm) is None


@pytest.mark.parametrize("engine", sorted(TESTED))
def test_every_tested_release_has_a_record_of_each_of_its_patches(engine):
    recorded = {p.stem for p in (shapes.RECORDS / engine).glob("*.json")}
    assert recorded == set(TESTED[engine]), "run `make shapes` (records must match compat.TESTED)"
    for release in TESTED[engine]:
        data = json.loads(shapes.record_path(engine, release).read_text())
        assert (data["engine"], data["release"]) == (engine, release)
        declared = {p.name for p in ALL_PATCHES if p.engine == engine and p.supports(release)}
        assert set(data["patches"]) == declared
        for name, targets in data["patches"].items():
            patch = next(p for p in ALL_PATCHES if p.name == name)
            assert set(targets) == set(shapes.kinds(patch)), name  # a new relies_on entry needs `make shapes`
