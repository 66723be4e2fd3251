"""What each patch relies on in the engine, described the same way on every release.

A patch is verified on its engine's tested releases (``patches/<engine>/facts.py``). On a
release newer than the newest tested one (same major version) it still
applies when everything it relies on has the shape it had on that newest
tested release: the wrapped callables' signatures, the attributes it adds
still free, the helpers and fields it reads. ``RLPROF_STRICT_VERSIONS=1``
turns this off (every untested release is refused, as before).

Each tested release's shapes are recorded in ``patches/shape_records/<engine>/<release>.json``,
generated from the release's own modules and checked against them by the
contract tests (``tests/compat``: a drift fails a test; ``make shapes``
rewrites the files). At run time only the newest tested release's file is
read, and only on an untested release.

What a target's shape is, by kind (``Patch.relies_on`` names the kind; wrap
targets default to ``signature``, ``add`` targets to ``present``):

- ``signature``: parameter names, kinds and which have defaults, e.g.
  ``(self, is_start=, profile_prefix=, *, delay_iterations=)``. Annotations
  and default values are left out: they change without breaking a wrapper.
- ``present``: ``present`` or ``absent`` (an attribute rlprof adds must be absent).
- ``params:a,b``: which of these parameters the callable accepts (for
  callables whose other parameters the patch passes through untouched,
  such as ``LLM.__init__``).
- ``fields:a,b``: which of these fields a config or request class declares.

A target is ``Class.attr`` in the patch's module, or ``module:qualified.name``
anywhere in the engine.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

from packaging.version import InvalidVersion, Version

from rlprof_plugins._env import on

STRICT_ENV = "RLPROF_STRICT_VERSIONS"
RECORDS = Path(__file__).resolve().parent / "shape_records"
_ABSENT = object()


# ---- describing one target ----------------------------------------------------
def _unwrapped(obj: Any) -> Any:
    """The engine's own callable under rlprof's wrappers and static/class methods."""
    obj = getattr(obj, "__func__", obj)
    while getattr(obj, "_self_rlprof_patch", None) and hasattr(obj, "__wrapped__"):
        obj = getattr(obj.__wrapped__, "__func__", obj.__wrapped__)
    return obj


def signature_text(obj: Any) -> str:
    """``(self, a, b=, *, c=, **kwargs)``: names, kinds and defaults, no annotations."""
    parts: list[str] = []
    star = slash = False
    params = list(inspect.signature(_unwrapped(obj)).parameters.values())  # through functools.wraps
    for p in params:
        if p.kind is p.POSITIONAL_ONLY:
            slash = True
        elif slash:
            parts.append("/")
            slash = False
        if p.kind is p.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        if p.kind is p.VAR_POSITIONAL:
            star = True
            parts.append(f"*{p.name}")
        elif p.kind is p.VAR_KEYWORD:
            parts.append(f"**{p.name}")
        else:
            parts.append(p.name + ("=" if p.default is not p.empty else ""))
    if slash:
        parts.append("/")
    return "(" + ", ".join(parts) + ")"


def _declared_fields(cls: Any) -> set[str]:
    if dataclasses.is_dataclass(cls):
        return {f.name for f in dataclasses.fields(cls)}
    for attr in ("__struct_fields__", "model_fields", "__annotations__"):  # msgspec, pydantic, plain
        names = getattr(cls, attr, None)
        if names:
            return set(names)
    return set()


def _which(wanted: list[str], have: set[str]) -> str:
    has = [w for w in wanted if w in have]
    lacks = [w for w in wanted if w not in have]
    return "; ".join(p for p in (("has " + ", ".join(has)) if has else "",
                                 ("lacks " + ", ".join(lacks)) if lacks else "") if p)


def describe(obj: Any, kind: str) -> str:
    """The shape of ``obj`` (``_ABSENT`` when the target does not exist)."""
    if obj is _ABSENT:
        return "absent"
    if kind == "present":
        return "present"
    try:
        if kind == "signature":
            return signature_text(obj)
        if kind.startswith("params:"):
            return _which(kind[len("params:"):].split(","), set(inspect.signature(_unwrapped(obj)).parameters))
        if kind.startswith("fields:"):
            return _which(kind[len("fields:"):].split(","), _declared_fields(obj))
    except (TypeError, ValueError) as e:  # not introspectable: itself a change worth reporting
        return f"not introspectable ({type(e).__name__})"
    raise ValueError(f"unknown shape kind {kind!r}")


def _lookup(module: Any, target: str) -> Any:
    """``Class.attr`` in ``module``, or ``module:qualified.name`` anywhere."""
    if ":" in target:
        name, _, target = target.partition(":")
        try:
            module = importlib.import_module(name)
        except Exception:
            return _ABSENT
    obj = module
    for part in target.split("."):
        # A class's own attribute, as the patch sees it (vars first: no descriptor binding).
        found = vars(obj).get(part, _ABSENT) if isinstance(obj, type) else _ABSENT
        if found is _ABSENT:
            found = getattr(obj, part, _ABSENT)
        if found is _ABSENT:
            return _ABSENT
        obj = found
    return obj


def kinds(patch: Any) -> dict[str, str]:
    """Every target the patch relies on, with the kind of shape recorded for it."""
    out = {target: "signature" for target in patch.wrap}
    out.update({target: "present" for target in patch.add})
    out.update(patch.relies_on)
    return out


def current(patch: Any, module: Any) -> dict[str, str]:
    """The shapes of ``patch``'s targets in the loaded ``module`` (and the engine around it),
    as the engine ships them: rlprof's own wrappers and additions are looked through."""
    out = {}
    for target, kind in kinds(patch).items():
        found = _lookup(module, target)
        if target in patch.add and found is patch.add[target]:
            found = _ABSENT  # added by this patch, already applied in this process
        out[target] = describe(found, kind)
    return out


# ---- records of the tested releases -------------------------------------------
def record_path(engine: str, release: str) -> Path:
    return RECORDS / engine / f"{release}.json"


@lru_cache(maxsize=None)
def recorded(engine: str, release: str) -> dict[str, dict[str, str]] | None:
    path = record_path(engine, release)
    if not path.exists():
        return None
    return json.loads(path.read_text())["patches"]


def record_text(engine: str, release: str, patches: dict[str, dict[str, str]]) -> str:
    data = {"engine": engine, "release": release,
            "generated_by": "make shapes (tests/compat: each contract module on the release's own modules)",
            "patches": patches}
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def changes(patch: Any, module: Any, release: str) -> list[str]:
    """What ``patch`` relies on that differs from its record on ``release``; empty: same shape."""
    record = (recorded(patch.engine, release) or {}).get(patch.name)
    if record is None:
        return [f"no shape of {patch.name} is recorded for {patch.engine} {release}"]
    now = current(patch, module)
    out = [f"{t}: {record.get(t, 'not recorded')} -> {now.get(t, 'not checked')}"
           for t in sorted(set(record) | set(now)) if record.get(t) != now.get(t)]
    return out


# ---- which releases the rule covers --------------------------------------------
def strict() -> bool:
    return on(STRICT_ENV)


def newest_tested(tested: Sequence[str]) -> str | None:
    """The newest of an engine's tested releases (its facts' ``TESTED``)."""
    return max(tested, key=Version) if tested else None


def untested_newer(tested: Sequence[str], version: str | None) -> str | None:
    """The newest of ``tested``, when ``version`` is newer than it with the
    same major version and the rule is on; otherwise None."""
    newest = newest_tested(tested)
    if version is None or newest is None or strict():
        return None
    try:
        v, n = Version(version), Version(newest)
    except InvalidVersion:
        return None
    return newest if v.release[:1] == n.release[:1] and Version(v.base_version) > Version(n.base_version) else None
