"""Talking to an object store (``s3://``, ``gs://``, any scheme fsspec knows): the one module that imports it.

rlprof reaches object stores through fsspec and the store's own fsspec package (s3fs, gcsfs): the
library most Python data tools already use, so credentials come from each store's standard chain
(environment variables, config files, instance roles) and the endpoint from the same places
(``AWS_ENDPOINT_URL`` for an S3-compatible server). They are an optional extra: an install without
them stays as light as a local-only one, and a URI given without them fails naming the extra.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

# the extra that brings each scheme's library (pyproject.toml's optional dependencies)
EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs"}
LOCAL_SCHEMES = ("file", "local")


# A store that does not answer fails a call within seconds, not minutes of the library's own retries:
# the uploader retries each file itself, with back-off, and says so in the manifest meanwhile.
_QUICK_FAILURE: dict[str, dict] = {
    scheme: {"config_kwargs": {"connect_timeout": 5, "read_timeout": 60,
                               "retries": {"max_attempts": 2, "mode": "standard"}}}
    for scheme in ("s3", "s3a")}


class MissingLibrary(RuntimeError):
    """A URI whose scheme needs a library this install lacks; the message names the extra."""


def scheme_of(uri: str) -> str | None:
    """``s3`` for ``s3://bucket/prefix``; None for a local path (``file://`` included)."""
    head, sep, _ = str(uri).partition("://")
    if not sep or len(head) < 2 or not head.replace("+", "").replace("-", "").isalnum():
        return None
    return None if head.lower() in LOCAL_SCHEMES else head.lower()


def is_uri(path: str | os.PathLike) -> bool:
    return scheme_of(str(path)) is not None


def require(uri: str) -> None:
    """Raise ``MissingLibrary`` naming the extra to install when this install cannot reach ``uri``'s store."""
    scheme = scheme_of(uri)
    extra = EXTRAS.get(scheme or "", None)
    hint = (f"pip install 'rlprof-plugins[{extra}]'" if extra
            else f"install fsspec's package for {scheme}:// (fsspec's list of known implementations names it)")
    try:
        from fsspec.registry import known_implementations, registry
    except ImportError:
        raise MissingLibrary(f"{uri!r} is an object store URI; reaching it needs fsspec: {hint}") from None
    if scheme in registry:
        return
    # found, not imported: an engine process checks its configuration without loading the store's client
    known = known_implementations.get(scheme or "")
    package = known["class"].split(".")[0] if known else None
    if package is None or importlib.util.find_spec(package) is None:
        missing = f"{package} is not installed" if package else "fsspec knows no library for it"
        raise MissingLibrary(f"{uri!r}: no library for {scheme}:// here ({missing}); {hint}")


@dataclass(frozen=True)
class RemoteFile:
    """One object below a prefix: its key relative to the prefix, its size and a tag that changes with it."""
    relative: str
    size: int
    tag: str


class Store:
    """One prefix of one object store, read and written through fsspec."""

    def __init__(self, uri: str) -> None:
        require(uri)
        import fsspec

        self.uri = uri.rstrip("/")
        self.fs, self.root = fsspec.core.url_to_fs(self.uri, skip_instance_cache=True,
                                                   **_QUICK_FAILURE.get(scheme_of(uri) or "", {}))
        self.root = self.root.rstrip("/")

    def url(self, relative: str) -> str:
        return f"{self.uri}/{relative}" if relative else self.uri

    def _key(self, relative: str) -> str:
        return f"{self.root}/{relative}" if relative else self.root

    def put(self, local: Path, relative: str) -> None:
        """Upload one file; the object appears whole or not at all (the store's own put)."""
        self.fs.put_file(str(local), self._key(relative))

    def put_bytes(self, relative: str, data: bytes) -> None:
        self.fs.pipe_file(self._key(relative), data)

    def read_bytes(self, relative: str) -> bytes | None:
        """The object's bytes; None when there is none."""
        try:
            return self.fs.cat_file(self._key(relative))
        except FileNotFoundError:
            return None

    def get(self, relative: str, local: Path) -> None:
        local.parent.mkdir(parents=True, exist_ok=True)
        self.fs.get_file(self._key(relative), str(local))

    def listing(self, below: str = "") -> Iterator[RemoteFile]:
        """Every object below the prefix (or below ``below`` inside it), never above it."""
        self.fs.invalidate_cache()
        start = self._key(below)
        try:
            found: dict[str, Any] = self.fs.find(start, detail=True)
        except FileNotFoundError:
            return
        for key, info in sorted(found.items()):
            if info.get("type") == "directory":
                continue
            relative = key[len(self.root):].lstrip("/")
            tag = str(info.get("ETag") or info.get("etag") or info.get("md5Hash") or info.get("mtime") or "")
            yield RemoteFile(relative=relative, size=int(info.get("size") or 0), tag=tag)
