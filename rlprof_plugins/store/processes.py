"""Which process wrote a manifest section, and whether it still runs.

Every section a process writes into ``manifest.json`` carries this identity
(host, pid, the process's start time and the machine's boot id), so a reader
on the same machine can tell a writer that is still at work from one that
was killed (``reaping.reap``). A leaf: the manifest stamps it, the writers'
reaper reads it, neither needs the other for it.
"""

from __future__ import annotations

import os
import socket
from functools import lru_cache
from pathlib import Path
from typing import Any


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


boot_id = _boot_id


def pid_namespace(pid: int | None = None) -> str | None:
    """The pid namespace a process runs in (``pid:[4026531836]``): containers on host networking share a
    hostname, not their pids, so a pid means something only inside its namespace. None: cannot tell."""
    try:
        return os.readlink(f"/proc/{pid or 'self'}/ns/pid")
    except OSError:
        return None


def _start_ticks(pid: int, *, running: bool = False) -> int | None:
    """The process's start time (clock ticks since boot), or None when no such process runs.
    ``running``: a process that has exited and waits for its parent to collect it (a zombie,
    as a killed worker is until its engine reaps it) counts as none: it writes nothing more."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:
        fields = stat.rsplit(")", 1)[1].split()  # the name before ")" may hold spaces
        if running and fields[0] in ("Z", "X"):  # field 3: the state
            return None
        return int(fields[19])  # field 22
    except (IndexError, ValueError):
        return None


@lru_cache(maxsize=None)
def _identity(pid: int) -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": pid, "started": _start_ticks(pid), "boot": _boot_id()}


def identity() -> dict[str, Any]:
    """This process, as a manifest section records it."""
    return dict(_identity(os.getpid()))


def identity_of(pid: int) -> dict[str, Any]:
    """Another process of this host, as ``identity`` records one (its start time read now)."""
    return {"host": socket.gethostname(), "pid": pid, "started": _start_ticks(pid), "boot": _boot_id()}


def alive(process: dict[str, Any] | None) -> bool | None:
    """Whether the process that wrote a section still runs; None when this
    machine cannot tell (no identity recorded, or another host)."""
    if not process or process.get("host") != socket.gethostname() or not process.get("pid"):
        return None
    if process.get("boot") and _boot_id() and process["boot"] != _boot_id():
        return False  # the machine restarted since
    started = _start_ticks(int(process["pid"]), running=True)
    if started is None:
        return False
    return process.get("started") in (None, started)  # a different start time: the pid was reused
