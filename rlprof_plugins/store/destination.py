"""An output folder in an object store: written into a local spool, uploaded from there.

A URI (``s3://bucket/prefix``) given as the output folder becomes a folder of this node's spool
(``RLPROF_SPOOL_DIR``, default ``/tmp/rlprof-spool``): ``<spool>/<scheme>/<bucket>/<prefix>``. Every
writer of rlprof writes there exactly as into a local folder (the same layout, manifests and locks),
so nothing on the engine's path knows about the store; a marker file at the spool folder's top names
its URI. The uploader (``store.upload``), a process of its own, copies what lands there to the URI.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..atomic_files import write_text_atomic
from .object_store import is_uri, require

SPOOL_ENV = "RLPROF_SPOOL_DIR"  # where the spool folders of this node live
SPOOL_MB_ENV = "RLPROF_SPOOL_MAX_MB"  # how large the spool may grow before uploaded copies are removed
DEFAULT_SPOOL = "/tmp/rlprof-spool"
DEFAULT_SPOOL_MB = 10240
MARKER = ".rlprof-destination.json"
_UNSAFE = re.compile(r"[^A-Za-z0-9._=-]+")


@dataclass(frozen=True)
class Destination:
    """Where a spool folder's files go: the URI, the spool folder and its bound in megabytes."""
    uri: str
    spool: Path
    max_mb: int

    def url_of(self, local: Path) -> str:
        """The URI a file or folder of the spool folder goes to (below ``servers/<name>/`` where another
        server holds the prefix: the uploader's manifest entry says so once it knows)."""
        relative = Path(local).resolve().relative_to(self.spool.resolve()).as_posix()
        return self.uri if relative == "." else f"{self.uri}/{relative}"


def spool_limit_mb() -> int:
    try:
        return max(1, int(os.environ.get(SPOOL_MB_ENV) or DEFAULT_SPOOL_MB))
    except ValueError:
        raise ValueError(f"{SPOOL_MB_ENV} must be a whole number of megabytes, got "
                         f"{os.environ.get(SPOOL_MB_ENV)!r}") from None


def spool_folder(uri: str) -> Path:
    """The spool folder of ``uri`` on this node: each part of the URI one folder, made safe."""
    scheme, _, rest = uri.partition("://")
    parts = [p for p in rest.split("/") if p and p not in (".", "..")]
    safe = [_UNSAFE.sub("-", p) for p in [scheme.lower(), *parts]]
    return Path(os.environ.get(SPOOL_ENV) or DEFAULT_SPOOL).resolve() / Path(*safe)


def open_destination(uri: str) -> Destination:
    """The spool folder for ``uri``, made and marked; raises ``object_store.MissingLibrary`` (naming the
    extra to install) when this install cannot reach the store, ``ValueError`` for a bad spool bound."""
    uri = uri.rstrip("/")
    require(uri)
    destination = Destination(uri=uri, spool=spool_folder(uri), max_mb=spool_limit_mb())
    destination.spool.mkdir(parents=True, exist_ok=True)
    marker = destination.spool / MARKER
    if not marker.exists():
        write_text_atomic(marker, json.dumps({"uri": uri}) + "\n")
    return destination


def destination_at(path: str | os.PathLike) -> Destination | None:
    """The destination of the spool folder holding ``path`` (a step folder, a server's folder below a
    shared root, or the spool folder itself); None for a plain local folder."""
    here = Path(path)
    for folder in (here, *here.parents):
        marker = folder / MARKER
        if marker.is_file():
            try:
                uri = json.loads(marker.read_text())["uri"]
            except (OSError, ValueError, KeyError, TypeError):
                return None
            return Destination(uri=uri, spool=folder, max_mb=spool_limit_mb())
    return None


__all__ = ["Destination", "destination_at", "is_uri", "open_destination", "spool_folder"]
