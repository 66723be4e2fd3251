"""Reading a trace root that lives in an object store: a local copy of what a command needs, kept.

``rlprof report``, ``summary``, ``merge`` and ``split`` read local folders; given a URI they read a
copy of it in this machine's cache (``$XDG_CACHE_HOME/rlprof/stores/...``, else ``~/.cache/...``).
Only objects below the URI are listed, only those the command wants are fetched (a step range leaves
the other step folders in the store), and an object already copied is fetched again only when the
store says it changed (its size or tag), so a second command over the same steps downloads nothing.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Callable

from ..atomic_files import write_text_atomic
from .object_store import Store, is_uri

INDEX = ".rlprof-cache-index.json"
_STEP = re.compile(r"(?:^|/)global_step_(\d+)(?:/|$)")
_UNSAFE = re.compile(r"[^A-Za-z0-9._=-]+")


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rlprof" / "stores"


def copy_folder(uri: str) -> Path:
    scheme, _, rest = uri.partition("://")
    parts = [_UNSAFE.sub("-", p) for p in [scheme.lower(), *rest.split("/")] if p and p not in (".", "..")]
    return cache_root() / Path(*parts)


def in_steps(steps: tuple[int, int] | None) -> Callable[[str], bool]:
    """Objects a command over ``steps`` (A, B) reads: those step folders, and everything outside any."""
    def wanted(relative: str) -> bool:
        found = _STEP.search(relative)
        return steps is None or found is None or steps[0] <= int(found.group(1)) <= steps[1]
    return wanted


def local_copy(uri: str, wanted: Callable[[str], bool] | None = None, store: Store | None = None) -> Path:
    """The local copy of ``uri`` with every object ``wanted`` says a command reads, brought up to date."""
    uri = uri.rstrip("/")
    store = store or Store(uri)
    folder = copy_folder(uri)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        index: dict[str, dict] = json.loads((folder / INDEX).read_text())
    except (OSError, ValueError):
        index = {}
    fetched = listed = 0
    try:
        for obj in store.listing():
            listed += 1
            if wanted is not None and not wanted(obj.relative):
                continue
            local = folder / obj.relative
            seen = {"size": obj.size, "tag": obj.tag}
            if index.get(obj.relative) == seen and local.is_file() and local.stat().st_size == obj.size:
                continue
            store.get(obj.relative, local)
            index[obj.relative] = seen
            fetched += 1
    finally:
        if fetched:
            write_text_atomic(folder / INDEX, json.dumps(index, sort_keys=True) + "\n")
    if not listed:
        raise FileNotFoundError(f"{uri}: no object below it (a bucket or prefix that does not exist)")
    return folder


def readable(path: str, steps: tuple[int, int] | None = None) -> str:
    """A command's path argument as a local path: itself, or for a URI its local copy (``steps`` only)."""
    return str(local_copy(path, in_steps(steps))) if is_uri(path) else path


def readable_file(path: str) -> str:
    """A command's file argument as a local path: itself, or for a URI its local copy."""
    if not is_uri(path):
        return path
    parent, _, name = path.rstrip("/").rpartition("/")
    return str(local_copy(parent, lambda relative: relative == name) / name)
