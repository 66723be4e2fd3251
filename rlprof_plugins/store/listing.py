"""A root known from listings of its files, read through paths that never touch this machine's disk.

``rlprof report ROOT --ray`` reads a fleet whose files lie on its nodes'
own disks. Each node lists what it holds below ROOT: every file's path,
size, modification time and kind, and the small files the report reads as
they are (manifests, claims, step logs, flight recorder notes) whole
(``report.on_ray.node.listing``). ``Listing`` merges those listings: which
nodes hold each file, and which copy is read where two nodes differ.

``ListedPath`` is a read-only path into a listing, with the part of
``pathlib.Path``'s interface the report's readers use (``/``, ``name``,
``is_dir``, ``iterdir``, ``glob``, ``stat``, ``read_bytes``, ``open``).
It shows ROOT as the user wrote it. It has no ``__fspath__`` on purpose:
a reader that would hand it to ``open()`` or ``os.stat()`` fails loudly
instead of reading this machine's disk; traces and memory snapshots are
never read through it at all, only by the passes that run where they lie.
"""

from __future__ import annotations

import fnmatch
import io
import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Iterator


@dataclass
class ListedFile:
    """One file below ROOT as listed, and the nodes that hold it."""

    rel: str
    size: int
    mtime_ns: int
    kind: str  # ``trace``, ``window``, ``memory`` or ``file`` (``report.on_ray.node.kind_of``)
    nodes: list[str] = field(default_factory=list)  # node names, the first listing's first


class NotCarried(OSError):
    """A file the listing names but did not carry whole: only a pass on a node that holds it reads it."""


@dataclass(frozen=True)
class ListedStat:
    """What ``stat()`` answers of a listed file (the fields the report's readers use)."""

    st_size: int
    st_mtime_ns: int
    st_ino: int = 0

    @property
    def st_mtime(self) -> float:
        return self.st_mtime_ns / 1e9


class Listing:
    """The files below ROOT, merged from every node's listing. A file several nodes list with the same size
    and time is one file (a shared filesystem, or the same copy); a path whose size or time differs between
    nodes is named in ``conflicts`` and the newest copy is the one kept."""

    def __init__(self, root_text: str) -> None:
        self.root_text = root_text
        self.files: dict[str, ListedFile] = {}
        self.contents: dict[str, bytes] = {}
        self.distributed: dict[str, dict] = {}  # manifest-less traces: the rank and world size their header records
        self.conflicts: list[str] = []
        self._children: dict[tuple[str, ...], dict[str, bool]] | None = None  # folder -> name -> is a folder

    def add(self, node: str, listed: dict[str, Any]) -> None:
        """One node's listing (``node.listing``, unpacked)."""
        self._children = None
        for rel, size, mtime_ns, kind in listed["files"]:
            if not stays_inside(rel):
                self.conflicts.append(f"{rel!r}: listed by {node} as a path that leads out of ROOT; not read")
                continue
            held = self.files.get(rel)
            if held is not None and (held.size, held.mtime_ns) == (size, mtime_ns):
                held.nodes.append(node)
                continue
            if held is not None:
                newer = (mtime_ns, size) > (held.mtime_ns, held.size)
                self.conflicts.append(
                    f"{rel}: differs between nodes ({', '.join(held.nodes)}: {held.size:,} bytes; {node}: "
                    f"{size:,} bytes); read {node + chr(39) + 's' if newer else 'the first'} (the newest)")
                if not newer:
                    continue
            self.files[rel] = ListedFile(rel, size, mtime_ns, kind, [node])
            self.contents.pop(rel, None)
            self.distributed.pop(rel, None)
            if rel in listed.get("contents", {}):
                self.contents[rel] = listed["contents"][rel]
            if rel in listed.get("distributed", {}):
                self.distributed[rel] = listed["distributed"][rel]

    @property
    def root(self) -> "ListedPath":
        return ListedPath(self, ())

    def children(self, folder: tuple[str, ...]) -> dict[str, bool]:
        """The names directly inside ``folder`` (parts below ROOT), each with whether it is a folder."""
        if self._children is None:
            tree: dict[tuple[str, ...], dict[str, bool]] = {(): {}}
            for rel in self.files:
                parts = tuple(rel.split("/"))
                for depth in range(len(parts)):
                    tree.setdefault(parts[:depth], {})[parts[depth]] = depth < len(parts) - 1
            self._children = tree
        return self._children.get(folder, {})


def stays_inside(rel: Any) -> bool:
    """Whether a path a node listed stays inside ROOT: relative, and no ``..`` anywhere in it."""
    return (isinstance(rel, str) and bool(rel) and not os.path.isabs(rel) and "\0" not in rel
            and ".." not in PurePosixPath(rel).parts)


class ListedPath:
    """A path below a ``Listing``'s ROOT (``parts``: its names below ROOT)."""

    __slots__ = ("listing", "_parts")

    def __init__(self, listing: Listing, parts: tuple[str, ...]) -> None:
        self.listing, self._parts = listing, parts

    # ---- naming ------------------------------------------------------------------------------------
    @property
    def rel(self) -> str:
        """The path below ROOT (``""`` for ROOT itself)."""
        return "/".join(self._parts)

    def __str__(self) -> str:
        root = self.listing.root_text
        return os.path.join(root, *self._parts) if self._parts else root

    def __repr__(self) -> str:
        return f"ListedPath({str(self)!r})"

    def __truediv__(self, name: Any) -> "ListedPath":
        parts = [p for p in str(name).split("/") if p and p != "."]
        if ".." in parts or str(name).startswith("/"):
            raise ValueError(f"{name!r}: a listed path stays inside ROOT")
        return ListedPath(self.listing, self._parts + tuple(parts))

    joinpath = __truediv__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ListedPath) and other.listing is self.listing and other._parts == self._parts

    def __hash__(self) -> int:
        return hash(self._parts)

    def __lt__(self, other: "ListedPath") -> bool:
        return self._parts < other._parts

    @property
    def name(self) -> str:
        return self._parts[-1] if self._parts else os.path.basename(self.listing.root_text.rstrip("/"))

    @property
    def stem(self) -> str:
        return PurePosixPath(self.name).stem

    @property
    def suffix(self) -> str:
        return PurePosixPath(self.name).suffix

    @property
    def parent(self) -> "ListedPath":
        """The folder above (ROOT's own: ROOT, as the listing knows nothing above it)."""
        return ListedPath(self.listing, self._parts[:-1])

    @property
    def parts(self) -> tuple[str, ...]:
        return Path(str(self)).parts

    def relative_to(self, other: "ListedPath") -> Path:
        if not isinstance(other, ListedPath) or self._parts[:len(other._parts)] != other._parts:
            raise ValueError(f"{self} is not below {other}")
        return Path(*self._parts[len(other._parts):]) if len(self._parts) > len(other._parts) else Path(".")

    def at(self, text: str) -> "ListedPath":
        """The listed path ``text`` names (a path below this one, as ``str()`` of one writes it)."""
        base = str(self)
        if text == base:
            return self
        if not text.startswith(base.rstrip(os.sep) + os.sep):
            raise ValueError(f"{text}: not below {base}")
        return self / text[len(base.rstrip(os.sep)) + 1:]

    # ---- what the listing says -----------------------------------------------------------------
    @property
    def _file(self) -> ListedFile | None:
        return self.listing.files.get(self.rel) if self._parts else None

    def is_file(self) -> bool:
        return self._file is not None

    def is_dir(self) -> bool:
        return not self._parts or (self._parts[-1] in self.listing.children(self._parts[:-1])
                                   and self.listing.children(self._parts[:-1])[self._parts[-1]])

    def exists(self) -> bool:
        return self.is_file() or self.is_dir()

    def is_symlink(self) -> bool:
        return False  # a node lists the files a link leads to inside ROOT as files of their own

    def iterdir(self) -> Iterator["ListedPath"]:
        for name in sorted(self.listing.children(self._parts)):
            yield ListedPath(self.listing, self._parts + (name,))

    def glob(self, pattern: str) -> Iterator["ListedPath"]:
        """The names directly inside this folder that match ``pattern`` (one level: no ``/`` or ``**``)."""
        if "/" in pattern or "**" in pattern:
            raise ValueError(f"{pattern!r}: a listed path globs one level")
        for path in self.iterdir():
            if fnmatch.fnmatchcase(path.name, pattern):
                yield path

    def walk(self) -> Iterator[tuple[str, list[str], list[str]]]:
        """As ``os.walk`` (top down; pruning ``dirs`` in place is honoured), the folders as ``str()`` of their
        listed path (``at`` turns one back)."""
        children = self.listing.children(self._parts)
        dirs = sorted(n for n, folder in children.items() if folder)
        yield str(self), dirs, sorted(n for n, folder in children.items() if not folder)
        for name in dirs:
            yield from (self / name).walk()

    def stat(self) -> ListedStat:
        held = self._file
        if held is None:
            if self.is_dir():
                return ListedStat(0, 0)
            raise FileNotFoundError(f"{self}: not listed by any node")
        return ListedStat(held.size, held.mtime_ns)

    def distributed_info(self) -> dict:
        """The rank and world size a manifest-less trace's header records, as its node read them."""
        return dict(self.listing.distributed.get(self.rel, {}))

    # ---- contents ------------------------------------------------------------------------------
    def read_bytes(self) -> bytes:
        if self.rel in self.listing.contents:
            return self.listing.contents[self.rel]
        if self._file is None:
            raise FileNotFoundError(f"{self}: not listed by any node")
        raise NotCarried(f"{self}: read only where it lies (its listing did not carry it)")

    def read_text(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return self.read_bytes().decode(encoding, errors)

    def open(self, mode: str = "r", encoding: str | None = None, errors: str | None = None) -> io.IOBase:
        if any(c in mode for c in "wax+"):
            raise PermissionError(f"{self}: a listed root is read only")
        data = io.BytesIO(self.read_bytes())
        return data if "b" in mode else io.TextIOWrapper(data, encoding=encoding or "utf-8", errors=errors)


def as_path(value: Any) -> "Path | ListedPath":
    """``value`` as a path: a listed one stays one (``Path()`` of it would read this machine's disk)."""
    return value if isinstance(value, ListedPath) else Path(value)


def walk(top: "Path | ListedPath") -> tuple[Iterator[tuple[str, list[str], list[str]]], Any]:
    """``os.walk`` of ``top`` (a listed one: ``ListedPath.walk``) and the function that turns a name it
    yields back into a path of the same kind."""
    if isinstance(top, ListedPath):
        return top.walk(), top.at
    return os.walk(top), Path
