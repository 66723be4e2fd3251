"""A patch: one engine symbol set, the versions it applies to, and why.

Modelled on OpenTelemetry's instrumentations: each patch declares the engine
version range it was verified against, wraps symbols with wrapt (so the
original is always called through and can be restored), and is applied from
a post-import hook so loading the plugin imports nothing heavy.

Never break serving: a patch whose version does not match, or whose target
is missing or changed, logs one warning naming the feature and the engine
version, and leaves the module exactly as it was.

Beyond the declared range: on a release newer than the newest tested one
(same major), a patch declared for that newest release applies when what it
relies on still has the recorded shape (``shapes.py``); otherwise it is off
with one warning naming what changed. ``RLPROF_STRICT_VERSIONS=1`` refuses
every release outside the declared ranges.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable, Sequence

import wrapt
from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from rlprof_plugins._log import logger, warn_once

from . import shapes

Wrapper = Callable[[Callable[..., Any], Any, tuple, dict], Any]


def resolve(module: ModuleType, target: str) -> tuple[Any, str]:
    parent: Any = module
    *path, attribute = target.split(".")
    for name in path:
        parent = getattr(parent, name)
    return parent, attribute


@dataclass(frozen=True)
class Patch:
    """Declaration of one patch; see ``docs/patches.md`` for the table."""

    name: str
    engine: str  # "vllm" or "sglang"
    versions: str  # PEP 440 specifier set the patch was verified against
    module: str  # the module whose import triggers the patch
    feature: str  # the user-visible feature it serves
    why: str
    upstream: str  # what upstream change would make this patch unnecessary
    wrap: dict[str, Wrapper] = field(default_factory=dict)  # "Class.method" -> wrapper
    add: dict[str, Any] = field(default_factory=dict)  # "Class.attr" -> new attribute
    # For targets that are not attributes (a FastAPI app's route table):
    # ``install(module)`` changes them and returns the function that undoes it.
    install: Callable[[ModuleType], Callable[[], None]] | None = None
    install_targets: tuple[str, ...] = ()
    # Wrap targets some releases in ``versions`` lack (e.g. a hook that only
    # newer releases have); a missing optional target is skipped, not fatal.
    optional: tuple[str, ...] = ()
    # Patches that serve the same engine area in different release eras (the
    # SGLang scheduler mixin vs its profiler manager) share an area: a feature
    # needs one patch per area on a given release. Empty: the patch's name.
    area: str = ""
    # What else the patch reads in the engine, with the kind of shape to
    # check on untested releases (see shapes.py): ``"module:name"`` or
    # ``"Class.attr"`` -> ``"signature"``, ``"present"``, ``"params:a,b"``,
    # ``"fields:a,b"``. Also overrides the default kind of a wrap target.
    relies_on: dict[str, str] = field(default_factory=dict)
    # Wrap each target in a plain ``async def`` (functools.wraps) instead of a
    # wrapt proxy: Ray reads a method's coroutine flag and signature when a
    # class becomes an actor, and an actor class is no place for a proxy
    # object. The wrapper is called as wrapt would (the original bound to the
    # instance) and awaited.
    plain_async: bool = False

    @property
    def area_name(self) -> str:
        return self.area or self.name

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(self.wrap) + tuple(self.add) + self.install_targets

    def supports(self, version: str) -> bool:
        try:
            return Version(version) in SpecifierSet(self.versions)
        except InvalidVersion:
            return False

    def covers(self, version: str | None, tested: Sequence[str] = ()) -> str | None:
        """How this patch may apply to ``version``: ``"declared"`` (in its
        range), ``"shape"`` (newer than the newest of the engine's ``tested``
        releases, if its shape holds: see ``shapes.changes``) or None."""
        if version is None:
            return None
        if self.supports(version):
            return "declared"
        newest = shapes.untested_newer(tested, version)
        return "shape" if newest is not None and self.supports(newest) else None

    # ---- apply / revert -------------------------------------------------
    def apply(self, module: ModuleType) -> None:
        """Wrap and add every target, or nothing: a failure undoes the rest."""
        if _applied.get(self.name) is module:
            return  # re-entrant: plugins load more than once per process
        done: list[tuple[Any, str, Any, bool]] = []
        try:
            for target, wrapper in self.wrap.items():
                try:
                    parent, attribute = resolve(module, target)
                    getattr(parent, attribute)  # a missing target fails here, before any change
                except AttributeError:
                    if target in self.optional:
                        continue
                    raise
                # An inherited method is wrapped on ``parent`` itself; revert
                # then deletes the wrapper instead of restoring an original.
                original = vars(parent).get(attribute, _INHERITED)
                if getattr(getattr(original, "__func__", original), "_self_rlprof_patch", None):
                    raise RuntimeError(f"{target} is already wrapped by rlprof")
                if self.plain_async:
                    proxy = _plain_async(getattr(parent, attribute), wrapper)
                    setattr(parent, attribute, proxy)
                elif type(original) in (staticmethod, classmethod):
                    # Keep a real staticmethod/classmethod around the wrapped
                    # function: a wrapt proxy *passes* isinstance(x, staticmethod)
                    # while being none, and SGLang's HookRegistry then takes the
                    # proxied __func__ and silently drops our wrapper.
                    proxy = wrapt.FunctionWrapper(original.__func__, wrapper)
                    setattr(parent, attribute, type(original)(proxy))
                else:
                    wrapt.wrap_function_wrapper(parent, attribute, wrapper)
                    proxy = vars(parent)[attribute]
                # wrapt proxies forward attributes to the wrapped function
                # unless they start with _self_.
                proxy._self_rlprof_patch = self.name
                done.append((parent, attribute, original, True))
            for target, value in self.add.items():
                parent, attribute = resolve(module, target)
                if hasattr(parent, attribute):
                    raise RuntimeError(f"{target} already exists; the engine changed")
                setattr(parent, attribute, value)
                done.append((parent, attribute, None, False))
            if self.install is not None:
                done.append((self.install(module), "", None, False))
        except Exception:
            _undo(done)
            raise
        _applied[self.name] = module
        _undo_log[self.name] = done

    def revert(self) -> None:
        """Restore every target; a no-op when the patch is not applied."""
        done = _undo_log.pop(self.name, None)
        _applied.pop(self.name, None)
        if done:
            _undo(done)

    @property
    def applied(self) -> bool:
        return self.name in _applied


_INHERITED = object()


def _plain_async(original: Callable[..., Any], wrapper: Wrapper) -> Callable[..., Any]:
    """``original`` (an ``async def`` method) behind ``wrapper``, as a plain coroutine function."""
    import functools
    import types

    @functools.wraps(original)
    async def method(self, *args, **kwargs):
        return await wrapper(types.MethodType(original, self), self, args, kwargs)

    return method


def _undo(done: list[tuple[Any, str, Any, bool]]) -> None:
    for parent, attribute, original, wrapped in reversed(done):
        if not attribute:  # an install's undo function
            parent()
        elif wrapped and original is not _INHERITED:
            setattr(parent, attribute, original)
        else:
            delattr(parent, attribute)


_applied: dict[str, ModuleType] = {}
_undo_log: dict[str, list[tuple[Any, str, Any, bool]]] = {}


def apply_guarded(patch: Patch, module: ModuleType, version: str | None, tested: Sequence[str] = ()) -> bool:
    """Apply ``patch`` if the engine version is covered (``tested``: the engine's tested
    releases, for the shape rule); never raise.

    Returns whether the patch is in place. Each refusal is logged once.
    """
    shown = version or "unknown"
    how = patch.covers(version, tested)
    if how is None:
        strict = " (RLPROF_STRICT_VERSIONS is set)" if version and shapes.strict() else ""
        warn_once(
            f"version:{patch.name}",
            "rlprof: %s is off: %s %s is outside the range %s verified for patch %s%s; "
            "the engine runs without it",
            patch.feature, patch.engine, shown, patch.versions, patch.name, strict,
        )
        return False
    if how == "shape":
        newest = shapes.untested_newer(tested, version)
        changed = shapes.changes(patch, module, newest)
        if changed:
            warn_once(
                f"shape:{patch.name}",
                "rlprof: %s is off on %s %s (an untested release): patch %s relies on what changed since "
                "the tested %s: %s; the engine runs without it",
                patch.feature, patch.engine, shown, patch.name, newest, "; ".join(changed),
            )
            return False
    try:
        patch.apply(module)
    except Exception as e:
        warn_once(
            f"apply:{patch.name}",
            "rlprof: %s is off on %s %s: patch %s could not apply (%s: %s); "
            "the engine runs without it",
            patch.feature, patch.engine, shown, patch.name, type(e).__name__, e,
        )
        return False
    logger.debug("rlprof: applied %s on %s %s%s", patch.name, patch.engine, shown,
                 " (untested release, shape checked)" if how == "shape" else "")
    return True


def announce_untested(engine: str, version: str | None, tested: Sequence[str]) -> None:
    """One line per process naming an untested release the shape rule covers."""
    newest = shapes.untested_newer(tested, version)
    if newest is not None:
        warn_once(
            f"untested:{engine}",
            "rlprof: %s %s is newer than the newest tested release %s; each rlprof patch applies only where "
            "what it relies on keeps the shape verified on %s (RLPROF_STRICT_VERSIONS=1 refuses this release)",
            engine, version, newest, newest,
        )


def install_on_import(patch: Patch, facts: Any, siblings: tuple[Patch, ...] = ()) -> None:
    """Apply ``patch`` when its module is imported (at once if it already is).

    ``facts`` is the engine's facts module (``patches/<engine>/facts.py``): its
    ``version()`` and its ``TESTED`` releases (the shape rule's reference).

    ``siblings`` serve the same area in other release eras: when one of them
    is declared for the running version, this patch is simply not for it,
    and stays quiet instead of warning that its feature is off.
    """

    def hook(module: ModuleType) -> None:
        try:
            version = facts.version()
            tested = tuple(getattr(facts, "TESTED", ()))
            announce_untested(patch.engine, version, tested)
            if not patch.covers(version, tested) and any(s.covers(version, tested) for s in siblings):
                logger.debug("rlprof: %s is for other %s releases (%s)", patch.name, patch.engine, patch.versions)
                return
            apply_guarded(patch, module, version, tested)
        except Exception as e:  # belt and braces: a hook must never raise
            warn_once(f"hook:{patch.name}", "rlprof: %s is off: %s", patch.feature, e)

    wrapt.register_post_import_hook(hook, patch.module)
