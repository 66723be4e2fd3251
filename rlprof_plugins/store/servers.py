"""Which server writes where, when several rollout servers share one output directory.

RL fleets start many rollout servers with one launch line, and on a shared
filesystem they share ``torch_profiler_dir``. Each server has an identity:
the ``server_name`` key (or ``RLPROF_SERVER_NAME``) where the user set one;
otherwise one derived where the server starts, from the host and the HTTP
port (``<host>-<port>``; a server spanning nodes: the head's address, which
every node shares), or the process where no HTTP server runs
(``<host>-pid<pid>``). The process that starts the server puts it in
``RLPROF_SERVER_NAME`` before its engine processes start, so every process
of one server agrees on it.

The first server to write into a directory claims it (``.rlprof-root.json``,
created exclusively: ``store.claim``): it keeps today's layout there
(``global_step_<N>/``, ``steps/``), and so does a single server, always,
restarted or not. Any other server running at the same time writes into
``servers/<identity>/`` below it, the same layout inside: nothing of two servers
is ever in one file or one ``ranks/`` folder, whatever the start order. A claim
whose server has ended (its process gone, seen from the same host; its lease
not renewed, seen from another) passes to the next server that starts there,
as a restarted server takes its own folder back.

Read back (``replicas_of``), a root holds one server or a fleet: verl's
replica folders, a folder per server (``rlprof collect``), servers sharing
one directory; each is a replica, named by its identity or its folder.
"""

from __future__ import annotations

import os
import re
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path

from .._log import logger
from . import claim, destination, upload
from .layout import FRONTEND, MEMORY, MERGED, RANKS, STEPS_DIR, step_folders

ENV = "RLPROF_SERVER_NAME"  # the user's name for a server (``server_name``'s variable)
ID_ENV = "RLPROF_SERVER_ID"  # the identity the server's first process chose, inherited by the others
PID_ENV = claim.PID_ENV  # that process: the claim lives as long as it does
CLAIM = claim.CLAIM
SERVERS_DIR = "servers"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_resolved: dict[tuple[str, str], Path] = {}
_spools: dict[str, Path] = {}  # an object store URI -> its spool folder on this node (``spooled``)
_moved: dict[str, Path] = {}  # a root this process's server lost -> where its writes go instead (``lost``)


def safe_name(name: str) -> str:
    """A server name usable as one folder name (``host:port`` -> ``host-port``; never ``.`` or ``..``)."""
    cleaned = _UNSAFE.sub("-", str(name)).strip("-.")
    return cleaned or "server"


def derived_name(port: int | None = None, head: str | None = None) -> str:
    """``<head>`` (a server spanning nodes: the address all its nodes share), ``<host>-<port>`` (an HTTP
    server), or ``<host>-pid<pid>`` (no HTTP server in this process)."""
    if head:
        return safe_name(head)
    host = socket.gethostname().split(".")[0] or "localhost"
    return safe_name(f"{host}-{port}" if port else f"{host}-pid{os.getpid()}")


def server_name() -> str | None:
    """This process's server identity (None: none was set where the server started)."""
    name = os.environ.get(ENV) or os.environ.get(ID_ENV)
    return safe_name(name) if name else None


def announce(name: str | None, port: int | None = None, head: str | None = None) -> str:
    """In the process that starts a server, before its engine processes start: its identity, exported
    for them: the configured ``name``, else the user's ``RLPROF_SERVER_NAME``, else the one this
    process chose before, else a derived one. An identity inherited from another process that
    announced (a trainer that ran an engine in process, then launched this server) is not this
    server's: it is derived anew."""
    mine = os.environ.get(PID_ENV) == str(os.getpid())
    if name:
        chosen = safe_name(name)
    elif os.environ.get(ENV):
        chosen = safe_name(os.environ[ENV])
    elif mine and os.environ.get(ID_ENV):
        chosen = os.environ[ID_ENV]
    else:
        chosen = derived_name(port, head)
    if not (mine and os.environ.get(claim.INSTANCE_ENV)):
        os.environ[claim.INSTANCE_ENV] = uuid.uuid4().hex  # this launch, told apart from any other of one name
    os.environ[ID_ENV], os.environ[PID_ENV] = chosen, str(os.getpid())
    if head:  # its nodes share the name: each node's claim check knows the others by this (``claim.is_mine``)
        os.environ[claim.HEAD_ENV] = safe_name(head)
    else:
        os.environ.pop(claim.HEAD_ENV, None)
    return chosen


def server_root(root: str | os.PathLike, name: str | None = None) -> Path:
    """Where this server's step folders and step logs go below the configured ``root``: ``root``
    itself for the server that claimed it (or for a process with no identity: today's layout),
    else ``root/servers/<name>`` (``root/servers/<name>.<host>-pid<pid>`` where another live server
    was given the same name). Decided once per process and root, and again if this server loses
    its claim (``lost``)."""
    name = name or server_name()
    base = spooled(root)
    if not name:
        return base
    key = (str(base), name)
    found = _resolved.get(key)
    if found is None:
        found = _decide(base, name)
        _resolved[key] = found
    return found


def spooled(root: str | os.PathLike) -> Path:
    """``root`` itself, or for an object store URI its spool folder on this node, its uploader running
    (``store.destination``, ``store.upload``)."""
    if not destination.is_uri(root):
        return Path(root)
    spool = _spools.get(str(root))
    if spool is None:  # made, marked and its library checked once per process and URI
        spool = _spools[str(root)] = destination.open_destination(str(root)).spool
    try:
        upload.ensure_running(spool)
    except OSError as e:  # the spool keeps every file; ``rlprof upload`` sends them
        logger.warning("rlprof: could not start the uploader of %s: %s; files wait in %s (finish with: %s)",
                       root, e, spool, upload.finish_command(spool))
    return spool


def _decide(base: Path, name: str) -> Path:
    try:
        holder = claim.take(base, name)
    except (claim.Undecided, OSError):
        return base / SERVERS_DIR / name  # undecided: never a second root
    if holder.mine:
        claim.keep_alive(base, name, on_lost=lambda why: lost(base, name, why))
        return base
    if holder.server == name:  # another live server, on this host or another, was given this name
        own = safe_name(f"{name}.{socket.gethostname().split('.')[0]}-pid{os.environ.get(PID_ENV) or os.getpid()}")
        held = _claim(base / CLAIM) or {}
        logger.warning("rlprof: two servers were given the name %r: the one on %s (pid %s) holds %s, and this one "
                       "on %s (pid %s) writes below %s (give each server its own server_name)", name,
                       held.get("host"), held.get("pid"), base, socket.gethostname(),
                       os.environ.get(PID_ENV) or os.getpid(), base / SERVERS_DIR / own)
        return base / SERVERS_DIR / own
    return base / SERVERS_DIR / name


def claimant(root: Path, name: str) -> str | None:
    """The server that holds ``root`` (taking it for ``name`` when no server does, or when the one that
    did has ended; ``store.claim``); None when it cannot be decided, the directory cannot be written (the
    writes that follow say why), or another live server holds it under the same name: such a server writes
    below ``servers/``, never a second root."""
    try:
        holder = claim.take(root, name)
    except (claim.Undecided, OSError):
        return None
    if holder.mine:
        claim.keep_alive(root, name, on_lost=lambda why: lost(root, name, why))
    elif holder.server == name:
        return None
    return holder.server


def lost(root: Path, name: str, why: str) -> None:
    """This server no longer holds ``root`` (its lease thread found out ``why``): it says so, and from now on
    this process writes below ``root/servers/<name>/`` (``server_root`` and ``current``), never the root's own
    step folders."""
    moved = Path(root) / SERVERS_DIR / name
    logger.warning("rlprof: server %r no longer holds %s: %s; this process writes below %s from now on",
                   name, root, why, moved)
    _resolved[(str(Path(root)), name)] = moved
    _moved[str(Path(root))] = moved


def current(root: str | os.PathLike) -> Path:
    """Where a write this process meant for ``root`` goes now: ``root``, or this server's folder below it once
    the server lost its claim on it (``lost``). Sessions and dumps ask as they begin."""
    return _moved.get(str(Path(root)), Path(root))


def _claim(path: Path) -> dict | None:
    try:
        return claim.read(path)
    except claim.Undecided:
        return None


def servers_in(root: str | os.PathLike) -> list[tuple[str, Path]]:
    """Every server that writes below a shared ``root``: ``(name, its root)``, the claimant first
    (named by its claim; a root without one is one unnamed server's, ``""``)."""
    base = Path(root)
    out: list[tuple[str, Path]] = []
    held = _claim(base / CLAIM)
    out.append((str(held["server"]) if held else "", base))
    folder = base / SERVERS_DIR
    if folder.is_dir():
        out += [(p.name, p) for p in sorted(folder.iterdir(), key=_natural) if p.is_dir() and not p.is_symlink()]
    return out


def step_servers(directory: str | os.PathLike) -> list[dict]:
    """Every server below the shared root that has the step folder ``directory`` names (its own one
    among them): ``[{"server", "directory", "state"}]``, the claimant first."""
    from . import manifest

    folder = Path(directory)
    owner = folder.parent
    shared = owner.parent.parent if owner.parent.name == SERVERS_DIR else owner
    out = []
    for name, root in servers_in(shared):
        step = root / folder.name
        if step.is_dir():
            data = manifest.read(step) or {}
            out.append({"server": data.get("server") or name or None, "directory": str(step),
                        "state": data.get("state", "no manifest")})
    return out


# ---- a fleet's output, as the report and the summary read it ---------------------
# folders inside a server's root that are never another server's
_NOT_SERVERS = {STEPS_DIR, SERVERS_DIR, RANKS, FRONTEND, MERGED, MEMORY, "prefill", "decode"}
DEPTH = 2  # how far below the root replicas are looked for (verl: one; collect of a fleet: two)


@dataclass(frozen=True)
class Replica:
    name: str
    root: Path


def holds_steps(folder: Path) -> bool:
    """Whether a folder is a server's root: step folders, or step logs."""
    return bool(step_folders(folder)) or any((folder / STEPS_DIR).glob("*.jsonl*"))


def _identity(root: Path, claimed: str) -> str | None:
    """A server root's own name: its claim, else the ``server`` its newest step manifest names."""
    if claimed:
        return claimed
    from . import manifest

    for _, folder in reversed(step_folders(root)):
        data = manifest.read(folder) or {}
        if data.get("server"):
            return str(data["server"])
    return None


def _natural(path: Path) -> list:
    """``replica_2`` before ``replica_10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]


def replicas_of(root: str | Path) -> list[Replica]:
    """Every server whose step folders or step logs lie below ``root`` (``root`` itself first)."""
    base = Path(root)
    found: list[Replica] = []

    def visit(folder: Path, label: str, depth: int) -> None:
        shared = servers_in(folder)
        claimed, _ = shared[0]
        if holds_steps(folder):
            # a folder below ROOT (verl's replica folders, ``rlprof collect``'s) is named by its folder; ROOT
            # itself by the server that holds it
            found.append(Replica(label or _identity(folder, claimed) or folder.name, folder))
        for name, server in shared[1:]:
            if holds_steps(server):
                found.append(Replica(name if not label else f"{label}/{name}", server))
        if depth >= DEPTH:
            return
        for child in sorted(folder.iterdir(), key=_natural) if folder.is_dir() else []:
            if (child.is_dir() and not child.is_symlink() and not child.name.startswith(".")
                    and child.name not in _NOT_SERVERS and not child.name.startswith("global_step_")):
                visit(child, child.name if not label else f"{label}/{child.name}", depth + 1)

    visit(base, "", 0)
    names: dict[str, int] = {}
    unique = []
    for replica in found:  # two folders naming the same server: keep them apart by folder
        n = names.get(replica.name, 0)
        names[replica.name] = n + 1
        unique.append(replica if not n else Replica(f"{replica.name}@{replica.root.relative_to(base)}", replica.root))
    return unique
