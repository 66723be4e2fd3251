"""One root per shared output directory: the claim file that says which server holds it, and how it is taken.

Servers started from one launch line on a shared filesystem write into one ``torch_profiler_dir``; the first
to claim it keeps today's layout there, every other writes below ``servers/<name>/`` (``servers.server_root``).
Two servers must never both believe they hold it. What makes that so, whatever the filesystem:

- **Creation is exclusive.** The claim is written whole into a file of its own, then hard-linked into place:
  ``link`` fails when the name exists, atomically, on local disks and on NFS alike (the server decides), so of
  servers racing for an empty folder exactly one creates the claim. Where links are refused (some FUSE mounts),
  ``O_CREAT | O_EXCL`` does the same. No ``os.replace``: it is atomic, not exclusive.
- **A takeover moves the dead claim aside first** and checks, by the claim's own id, that what it moved is the
  claim it judged dead; anything else (a live claim just created by another server) is linked back and left.
- **Liveness is the claimant's process, where this host can see it**: same host, same boot, same pid namespace
  (containers on host networking share a hostname, not their pids), then its pid and start time. **Elsewhere
  it is a lease**: every process of the holding server touches the claim every ``LEASE_S / 4`` seconds, and a
  claim untouched for ``LEASE_S`` (by the filesystem's own clock, read from a file touched for it, so hosts'
  clocks do not matter) has ended. NFS may hide a claim another host just created for as long as its attribute
  cache holds an entry; the exclusive create still sees it (the server answers), and a claim that cannot be read
  counts as held.
- **Every wait ends.** The lock that orders takeovers (``flock``, else an exclusive ``mkdir``) is waited for
  at most ``LOCK_WAIT_S``; a server that cannot decide writes below ``servers/<name>/``: never a second root.
- **A name is not an identity.** A claim is this server's only when its writer is: on this host (same boot,
  same pid namespace) this server's first process (pid and start time); on any host a node of the same server
  spanning nodes (the same head address), or a process started from the same launch (the instance id the
  server's first process hands its processes). Another live server given the same name, on this host or
  another, is told so and writes below a folder of its own. (A claim written before claims carried an
  instance id is judged by its name on another host, as then.)
- **A holder that loses its claim stops writing the root.** The lease thread reads the claim at every
  renewal: once it is another server's, gone, or cannot be renewed for half a lease, the process says so in
  its log and ``on_lost`` moves its later writes below ``servers/<name>/`` (``servers.lost``).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple

from . import processes

CLAIM = ".rlprof-root.json"
LOCK = ".rlprof-root.lock"
LEASE_S = 120.0  # a claim whose holder this host cannot see ends when untouched this long
LOCK_WAIT_S = 30.0
PID_ENV = "RLPROF_SERVER_PID"  # the server's first process: its claim lives as long as that process does
HEAD_ENV = "RLPROF_SERVER_HEAD"  # a server spanning nodes: the head address every node is given (``servers.announce``)
INSTANCE_ENV = "RLPROF_SERVER_INSTANCE"  # one launch of a server: a random id its first process hands the others


class Undecided(Exception):
    """The claim could not be read or taken in time: the caller writes below ``servers/<name>/``."""


class Holder(NamedTuple):
    """Who holds a root: the server's name, and whether that is this server (its own claim)."""

    server: str
    mine: bool


_WRITER_KEYS = ("host", "boot", "pidns", "pid", "started")  # what tells this server's claim from another's


def holder_identity() -> dict[str, Any]:
    """The process a claim lives as long as: the server's first process (``RLPROF_SERVER_PID``), else this one."""
    pid = int(os.environ.get(PID_ENV) or os.getpid())
    ident = dict(processes.identity_of(pid))
    ident["pidns"] = processes.pid_namespace(pid)
    ident["head"] = os.environ.get(HEAD_ENV) or None
    ident["instance"] = os.environ.get(INSTANCE_ENV) or None
    return ident


def read(path: Path) -> dict | None:
    """The claim at ``path`` (None: there is none). Raises ``Undecided`` when one exists and cannot be read."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise Undecided(f"{path}: {e}") from e
    try:
        data = json.loads(text)
    except ValueError:
        raise Undecided(f"{path}: unreadable claim") from None
    if not isinstance(data, dict) or not data.get("server"):
        raise Undecided(f"{path}: not a claim")
    return data


def alive(claim: dict, path: Path) -> bool:
    """Whether the server that holds ``claim`` still runs: its process where this host can see it, else its
    lease (the claim's age on the filesystem's clock)."""
    mine = {"host": socket.gethostname(), "boot": processes.boot_id(), "pidns": processes.pid_namespace()}
    if all(claim.get(k) == v and v is not None for k, v in mine.items()):
        return processes.alive({"host": claim["host"], "pid": claim.get("pid"), "started": claim.get("started"),
                                "boot": claim.get("boot")}) is not False
    return _age(path) < LEASE_S


def _age(path: Path) -> float:
    """How long ago the claim was last touched, by the filesystem's own clock (a file touched for the reading)."""
    probe = path.with_name(f".{path.name}.now.{os.getpid()}.{threading.get_ident()}")
    try:
        probe.touch()
        now = probe.stat().st_mtime
        return max(0.0, now - path.stat().st_mtime)
    except FileNotFoundError:
        return float("inf")
    except OSError:
        return 0.0  # cannot tell: held
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()


def is_mine(claim: dict, name: str) -> bool:
    """Whether ``claim`` is this server's: its name, and its writer: on this host the server's first process;
    anywhere a node of the same server spanning nodes, or a process of the same launch."""
    if claim.get("server") != name:
        return False
    me = holder_identity()
    if me.get("head") and claim.get("head") == me["head"]:
        return True  # a node of the same server spanning nodes (each node's processes its own)
    if me.get("instance") and claim.get("instance") == me["instance"]:
        return True
    if not all(claim.get(k) == me.get(k) and me.get(k) is not None for k in ("host", "boot", "pidns")):
        return not (me.get("instance") and claim.get("instance"))  # another host: another launch of one name
    return all(claim.get(k) == me.get(k) for k in _WRITER_KEYS)


def take(root: Path, name: str) -> Holder:
    """Who holds ``root``: taken for ``name`` when no server holds it or its holder has ended. Raises
    ``Undecided`` (the caller writes below ``servers/<name>/``) and ``OSError`` (an unwritable root)."""
    root.mkdir(parents=True, exist_ok=True)
    path = root / CLAIM
    held = read(path)
    if held is not None and (is_mine(held, name) or alive(held, path)):
        return Holder(str(held["server"]), is_mine(held, name))
    with _locked(root):
        held = read(path)
        if held is not None:
            if is_mine(held, name) or alive(held, path):
                return Holder(str(held["server"]), is_mine(held, name))
            _move_aside(path, held)
        return _create(path, name)


def _create(path: Path, name: str) -> Holder:
    """Create the claim for ``name`` exclusively; whoever created it first holds the root."""
    claim = {"server": name, **{k: v for k, v in holder_identity().items() if k != "server"},
             "id": uuid.uuid4().hex, "claimed_at": round(time.time(), 3)}
    temporary = path.with_name(f".{path.name}.{claim['id']}.tmp")
    temporary.write_text(json.dumps(claim))
    try:
        try:
            os.link(temporary, path)
        except FileExistsError:
            return _existing(path, name)
        except OSError:  # no hard links on this mount: an exclusive create, written after
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                return _existing(path, name)
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(claim))
        return Holder(name, True)
    finally:
        with contextlib.suppress(OSError):
            temporary.unlink()


def _existing(path: Path, name: str) -> Holder:
    """The claim another server created first."""
    held = read(path)
    if held is None:
        raise Undecided(f"{path}: a claim came and went") from None
    return Holder(str(held["server"]), is_mine(held, name))


def _move_aside(path: Path, dead: dict) -> None:
    """Take a dead claim out of the way, checking that it is the one judged dead (by its id)."""
    aside = path.with_name(f".{path.name}.ended.{uuid.uuid4().hex}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return  # another server moved it first
    moved = read(aside) or {}
    if moved.get("id") != dead.get("id") or moved.get("server") != dead.get("server"):
        with contextlib.suppress(OSError):  # a live claim, created since: back where it was
            os.link(aside, path)
        with contextlib.suppress(OSError):
            aside.unlink()
        raise Undecided(f"{path}: the claim changed while it was taken over")
    with contextlib.suppress(OSError):
        aside.unlink()


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """The lock that orders takeovers, waited for at most ``LOCK_WAIT_S``: ``flock``, else an exclusive ``mkdir``
    (a mount without ``flock``) whose holder is given up when it has not touched it for ``LEASE_S``."""
    fd = os.open(root / LOCK, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        import fcntl

        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise Undecided(f"{root / LOCK}: held longer than {LOCK_WAIT_S:.0f} s") from None
                time.sleep(0.01)
            except OSError:  # this mount refuses flock
                with _mkdir_lock(root):
                    yield
                return
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _mkdir_lock(root: Path) -> Iterator[None]:
    lock = root / f"{LOCK}.d"
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            lock.mkdir()
            break
        except FileExistsError:
            if _age(lock) > LEASE_S:  # its holder died holding it
                with contextlib.suppress(OSError):
                    lock.rmdir()
                continue
            if time.monotonic() > deadline:
                raise Undecided(f"{lock}: held longer than {LOCK_WAIT_S:.0f} s") from None
            time.sleep(0.01)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            lock.rmdir()


_RENEWING: set[str] = set()
_RENEW_LOCK = threading.Lock()


def keep_alive(root: Path, name: str, on_lost: Callable[[str], None] | None = None) -> None:
    """In a process of the server that holds ``root``: touch its claim every ``LEASE_S / 4`` seconds while it
    is still this server's, so hosts that cannot see this process know the server runs (one thread a root).
    Once the claim is another server's or gone, or has not been renewed for half a lease (a filesystem that
    refuses writes), ``on_lost(why)`` is told, once, and the thread ends."""
    key = str(root / CLAIM)
    with _RENEW_LOCK:
        if key in _RENEWING:
            return
        _RENEWING.add(key)

    def renew() -> None:
        path = root / CLAIM
        failing_since: float | None = None
        why = None
        while why is None:
            time.sleep(LEASE_S / 4)
            try:
                held = read(path)
                if held is None:
                    why = "its claim is gone"
                elif not is_mine(held, name):
                    why = f"the claim is now server {held['server']!r}'s (pid {held.get('pid')} on {held.get('host')})"
                else:
                    os.utime(path)
                    failing_since = None
            except (Undecided, OSError) as e:
                failing_since = failing_since if failing_since is not None else time.monotonic()
                if time.monotonic() - failing_since >= LEASE_S / 2:
                    why = f"its lease could not be renewed for {time.monotonic() - failing_since:.0f} s: {e}"
        with _RENEW_LOCK:
            _RENEWING.discard(key)
        if on_lost is not None:
            try:
                on_lost(why)
            except Exception:  # the writes that follow still check (servers.current)
                pass

    threading.Thread(target=renew, name="rlprof-claim-lease", daemon=True).start()
