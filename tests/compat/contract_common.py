"""What every engine's contract module checks the same way."""

from __future__ import annotations

import importlib
import logging

from rlprof_plugins.patches.base import resolve, apply_guarded

ABSENT = object()


def check_release_imported(package: str, version: str, expected: str) -> None:
    """The engine imported is the release under test (its unpacked wheel, when
    one is on the path), not the one installed in the environment."""
    import os
    from pathlib import Path

    assert version.startswith(expected), (version, expected)
    path = os.environ.get("RLPROF_CONTRACT_PATH")
    if path:
        module = importlib.import_module(package)
        assert Path(module.__file__).resolve().is_relative_to(Path(path).resolve())


def filled(cls, **given):
    """A real instance of one of the release's dataclasses built by its own
    constructor; required fields not given get empty values of their type
    (``*_size`` fields 1)."""
    import dataclasses

    values = {}
    for f in dataclasses.fields(cls):
        if f.name in given or not f.init or f.default is not dataclasses.MISSING \
                or f.default_factory is not dataclasses.MISSING:
            continue
        text = str(f.type)
        values[f.name] = (1 if f.name.endswith("_size") else {} if "dict" in text else set() if "set" in text
                          else [] if "list" in text else 0 if text in ("int", "<class 'int'>") else None)
    return cls(**values, **given)


def wait_done(status_of, step: int, timeout: float = 60) -> dict:
    """Poll ``status_of(step)`` until the step's session is done or failed."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = status_of(step)
        if status["state"] in ("done", "failed"):
            return status
        time.sleep(0.1)
    raise AssertionError(f"session of step {step} did not finish: {status}")


def try_import(name: str):
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def snapshot(module, patch) -> dict:
    """Identity of every attribute target of ``patch`` (absent ones too)."""
    out = {}
    for target in patch.targets:
        if target in patch.install_targets:
            continue
        try:
            parent, attr = resolve(module, target)
        except AttributeError:
            out[target] = ABSENT
            continue
        out[target] = vars(parent).get(attr, ABSENT) if isinstance(parent, type) else getattr(parent, attr, ABSENT)
    return out


def marker(obj):
    """The rlprof patch name carried by a wrapper (through staticmethods)."""
    return getattr(getattr(obj, "__func__", obj), "_self_rlprof_patch", None)


def check_patch_on_release(patch, version: str, caplog) -> None:
    """A declared patch applies to the release's module and reverts exactly
    (on an untested newer release: one whose recorded shape holds); an
    undeclared one is refused with one warning and changes nothing."""
    module = try_import(patch.module)
    patch.revert()
    if patch.covers(version):
        assert module is not None, f"{patch.module} is missing on {patch.engine} {version}"
        pristine = snapshot(module, patch)
        assert apply_guarded(patch, module, version)
        for target in patch.wrap:
            if pristine[target] is ABSENT and target in patch.optional:
                continue
            parent, attr = resolve(module, target)
            assert marker(vars(parent)[attr]) == patch.name, target
        patch.revert()
        assert snapshot(module, patch) == pristine
        return
    if module is None:
        return  # the module does not exist on this release: the hook never fires
    pristine = snapshot(module, patch)
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        assert not apply_guarded(patch, module, version)
        assert not apply_guarded(patch, module, version)
    said = [r.getMessage() for r in caplog.records if patch.name in r.getMessage()]
    assert len(said) == 1 and patch.feature in said[0] and version in said[0], said
    assert snapshot(module, patch) == pristine


def altered_module(real_name: str, old: str, new: str):
    """A copy of a release's module with one edit, as a changed release would ship it."""
    import inspect

    source = inspect.getsource(importlib.import_module(real_name))
    assert old in source, f"{old!r} not in {real_name}"
    package, _, leaf = real_name.rpartition(".")
    altered = type(importlib)(f"{package}.{leaf}_altered")
    altered.__file__, altered.__package__ = "altered", package
    import sys

    sys.modules[altered.__name__] = altered  # dataclass decorators look their module up there
    try:
        exec(compile(source.replace(old, new), "altered", "exec"), altered.__dict__)
    finally:
        sys.modules.pop(altered.__name__, None)
    return altered


def applied_patches(patches, version: str):
    """Apply every patch declared for ``version``; returns them (to revert)."""
    applied = []
    for patch in patches:
        patch.revert()
        if patch.supports(version):
            assert apply_guarded(patch, importlib.import_module(patch.module), version), patch.name
            applied.append(patch)
    return applied


def check_recorded_shapes(patches, engine: str, release: str) -> None:
    """The shapes recorded for this tested release (patches/shape_records/)
    are what its own modules have; ``RLPROF_UPDATE_SHAPES=1`` rewrites them."""
    import json
    import os

    from rlprof_plugins.cli.compatibility import TESTED
    from rlprof_plugins.patches import shapes

    import pytest

    if release not in TESTED[engine]:
        pytest.skip(f"{engine} {release} is not a tested release: no shapes are recorded for it")
    now = {p.name: shapes.current(p, importlib.import_module(p.module)) for p in patches if p.supports(release)}
    path = shapes.record_path(engine, release)
    if os.environ.get("RLPROF_UPDATE_SHAPES") == "1":
        from tests.helpers.installed import tree_record_path

        tree_record_path(engine, release).parent.mkdir(parents=True, exist_ok=True)
        tree_record_path(engine, release).write_text(shapes.record_text(engine, release, now))
        return
    assert path.exists(), f"no shapes recorded for {engine} {release}: run `make shapes`"
    recorded = json.loads(path.read_text())["patches"]
    drift = {name: {t: (recorded.get(name, {}).get(t), shape) for t, shape in now[name].items()
                    if recorded.get(name, {}).get(t) != shape} for name in now}
    assert recorded == now, f"{path.name} drifted from {engine} {release} (recorded, now): " + json.dumps(
        {k: v for k, v in drift.items() if v}, indent=1) + "\nrun `make shapes` if the change is intended"


def check_doctor(engine: str, version: str) -> dict:
    """``rlprof doctor`` on this release reports what the table and the
    patches say: every declared patch applies (dry run), the rest are off."""
    import json
    import os
    import subprocess
    import sys

    from rlprof_plugins.cli import compatibility as compat
    from rlprof_plugins.patches import ALL_PATCHES

    # the same harness adaptations as this process (tests/compat/release_env.py)
    code = ("import sys; from tests.compat.release_env import adapt; adapt(sys.argv[1]); "
            "from rlprof_plugins.cli import main; sys.exit(main(['doctor', '--engine', sys.argv[1], '--json']))")
    out = subprocess.run([sys.executable, "-c", code, engine], capture_output=True, text=True, timeout=600,
                         env=dict(os.environ))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    report = json.loads(out.stdout)["engines"][0]
    tested = version in compat.TESTED[engine]
    assert report["version"] == version and report["supported"] and report["tested"] == tested and report["ok"]
    applies = {p.name: bool(p.covers(version)) for p in ALL_PATCHES if p.engine == engine}
    expected = (compat.features(engine, version, applies=lambda p: applies[p.name])
                + compat.capabilities(engine, version))
    assert [(f["feature"], f["available"]) for f in report["features"]] == [(s.feature, s.available) for s in expected]
    states = {p["name"]: p["state"] for p in report["patches"]}
    assert states == {name: "applies" if on else "off" for name, on in applies.items()}
    assert report["configure"] == compat.how_to_configure(engine, version)
    return report
