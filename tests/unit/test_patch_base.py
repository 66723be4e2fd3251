"""The patch mechanism itself: all-or-nothing apply, exact revert, one warning."""

import logging
import types

import pytest

from tests.unit.patches_under_test import make_module
from rlprof_plugins.patches.base import Patch, apply_guarded


def _double(wrapped, instance, args, kwargs):
    return 2 * wrapped(*args, **kwargs)


def make_patch(name="t.patch", versions=">=1.0,<2", **kw):
    defaults = dict(
        name=name, engine="eng", versions=versions, module="m", feature="feature X",
        why="test", upstream="n/a", wrap={"Engine.run": _double, "helper": _double},
    )
    defaults.update(kw)
    return Patch(**defaults)


def test_apply_wraps_and_revert_restores_identity():
    mod = make_module()
    original_run, original_helper = mod.Engine.__dict__["run"], mod.helper
    patch = make_patch()
    assert apply_guarded(patch, mod, "1.2.0")
    assert mod.Engine().run() == 2 and mod.helper() == 2
    patch.revert()
    assert mod.Engine.__dict__["run"] is original_run and mod.helper is original_helper
    assert mod.Engine().run() == 1


def test_apply_twice_is_a_no_op():
    mod = make_module()
    patch = make_patch(name="t.twice")
    assert apply_guarded(patch, mod, "1.0")
    assert apply_guarded(patch, mod, "1.0")
    assert mod.Engine().run() == 2  # wrapped once, not twice
    patch.revert()


def test_inherited_method_is_wrapped_on_the_subclass_and_removed_on_revert():
    mod = make_module()
    patch = make_patch(name="t.inherit", wrap={"Child.run": _double})
    assert apply_guarded(patch, mod, "1.0")
    assert mod.Child().run() == 2 and mod.Engine().run() == 1
    patch.revert()
    assert "run" not in vars(mod.Child) and mod.Child().run() == 1


def test_missing_target_changes_nothing_and_warns_once(caplog):
    mod = make_module()
    del mod.helper  # the engine changed: one target is gone
    original_run = mod.Engine.__dict__["run"]
    patch = make_patch(name="t.missing")
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        assert not apply_guarded(patch, mod, "1.0")
        assert not apply_guarded(patch, mod, "1.0")
    assert mod.Engine.__dict__["run"] is original_run  # the first target was undone
    warnings = [r for r in caplog.records if "feature X is off" in r.getMessage()]
    assert len(warnings) == 1 and "eng 1.0" in warnings[0].getMessage()


def test_unsupported_version_is_skipped_with_one_warning(caplog):
    mod = make_module()
    patch = make_patch(name="t.version")
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        assert not apply_guarded(patch, mod, "2.5.0")
        assert not apply_guarded(patch, mod, "2.5.0")
    assert mod.Engine().run() == 1
    messages = [r.getMessage() for r in caplog.records if "feature X" in r.getMessage()]
    assert len(messages) == 1 and "eng 2.5.0 is outside the range >=1.0,<2" in messages[0]


def test_local_version_labels_match():
    assert make_patch().supports("1.4.0+cpu")
    assert not make_patch().supports("not-a-version")


def test_added_attribute_must_not_exist_already():
    mod = make_module()
    patch = make_patch(name="t.add", wrap={}, add={"Engine.run": lambda self: 0})
    with pytest.raises(RuntimeError):
        patch.apply(mod)
    assert mod.Engine().run() == 1


def test_missing_optional_target_is_skipped_and_the_rest_applied():
    mod = make_module()
    patch = Patch(name="t.optional", engine="fake", versions=">=1", module="fake_engine", feature="f", why="w",
                  upstream="u", wrap={"Engine.run": lambda w, i, a, k: w(*a, **k) + 1,
                                      "Engine.gone": lambda w, i, a, k: w(*a, **k)},
                  optional=("Engine.gone",))
    assert apply_guarded(patch, mod, "1.0")
    assert mod.Engine().run() == 2 and not hasattr(mod.Engine, "gone")
    patch.revert()
    assert mod.Engine().run() == 1


def test_a_patch_for_another_era_of_its_area_stays_quiet(caplog):
    """Two patches serve one area in different releases: on a release, the
    one declared applies and the other neither applies nor warns."""
    import sys

    import wrapt

    from rlprof_plugins.patches.base import install_on_import

    mod = make_module()
    mod.__name__ = "fake_engine_eras"
    old = Patch(name="t.old_era", engine="fake", versions="<2", module=mod.__name__, feature="f", why="w",
                upstream="u", wrap={"Engine.run": lambda w, i, a, k: "old"}, area="t.area")
    new = Patch(name="t.new_era", engine="fake", versions=">=2", module=mod.__name__, feature="f", why="w",
                upstream="u", wrap={"Engine.run": lambda w, i, a, k: "new"}, area="t.area")
    facts = types.SimpleNamespace(version=lambda: "2.1", TESTED=("2.1",))  # an engine's facts module, as read
    sys.modules[mod.__name__] = mod
    try:
        with caplog.at_level(logging.DEBUG, logger="rlprof"):
            install_on_import(old, facts, (new,))
            install_on_import(new, facts, (old,))
        assert mod.Engine().run() == "new" and new.applied and not old.applied
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    finally:
        new.revert()
        sys.modules.pop(mod.__name__)
        wrapt.importer._post_import_hooks.pop(mod.__name__, None)


def test_plain_async_wraps_with_a_coroutine_function_and_reverts():
    """``plain_async`` (verl's Ray actor classes): a plain ``async def`` with the original's
    signature and coroutine flag, the wrapper called as wrapt would (bound original), exact revert."""
    import asyncio
    import inspect
    import types

    class Server:
        async def start_profile(self, **kwargs):
            return ("verl", self, kwargs)

    seen = []

    async def wrapper(wrapped, instance, args, kwargs):
        seen.append((wrapped.__func__, instance))
        return await wrapped(*args, **{**kwargs, "seen": True})

    mod = types.ModuleType("m")
    mod.Server = Server
    original = Server.__dict__["start_profile"]
    patch = make_patch(name="t.plain", wrap={"Server.start_profile": wrapper}, plain_async=True)
    assert apply_guarded(patch, mod, "1.0")
    method = Server.start_profile
    assert type(method) is types.FunctionType and inspect.iscoroutinefunction(method)
    assert str(inspect.signature(method)) == "(self, **kwargs)" and method.__wrapped__ is original
    server = Server()
    assert asyncio.run(server.start_profile(a=1)) == ("verl", server, {"a": 1, "seen": True})
    assert seen == [(original, server)]
    with pytest.raises(RuntimeError, match="already wrapped"):
        patch.apply(types.SimpleNamespace(Server=Server))  # another module object, same class
    patch.revert()
    assert Server.__dict__["start_profile"] is original
