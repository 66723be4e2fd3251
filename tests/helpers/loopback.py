"""Which TCP connections a process tree made, read with ``ss`` while it runs: Ray's must stay on the loopback.

Ray binds to the machine's network address unless told otherwise (a driver's
``127.0.0.1`` is rewritten to it when it joins). The tests that start Ray give
every node and driver ``127.0.0.2``; ``Connections`` polls ``ss -tnpa`` every
0.2 s while they run and keeps every connection (established, opening,
closing) of a process in the trees it watches, so a test can assert that none
had an end off the loopback.
"""

from __future__ import annotations

import ipaddress
import os
import re
import subprocess
import threading
from pathlib import Path

_PIDS = re.compile(r"pid=(\d+)")


def descendants(roots: set[int]) -> set[int]:
    """``roots`` and every process below them (from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                parents[int(entry.name)] = int(fields[1])
            except (OSError, IndexError, ValueError):
                continue
    out = set(roots)
    grown = True
    while grown:
        grown = False
        for pid, parent in parents.items():
            if parent in out and pid not in out:
                out.add(pid)
                grown = True
    return out


def _host(address: str) -> str:
    host = address.rsplit(":", 1)[0].strip("[]")
    return host.removeprefix("::ffff:")


def off_loopback(line: str) -> bool:
    """An ``ss`` line whose local or peer end is not a loopback address (``*``: a listener, not a connection)."""
    parts = line.split()
    for address in parts[3:5]:
        host = _host(address)
        if host in ("*", "0.0.0.0", "::"):
            continue
        if not ipaddress.ip_address(host).is_loopback:
            return True
    return False


class Connections:
    """Polls ``ss`` in a thread while the block runs; ``lines`` keeps the watched trees' connections."""

    def __init__(self, *roots: int) -> None:
        self.roots = set(roots)
        self.lines: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def watch(self, pid: int) -> None:
        self.roots.add(pid)

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(0.2)

    def sample(self) -> None:
        pids = descendants(self.roots)
        out = subprocess.run(["ss", "-Htnpa"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("LISTEN"):
                continue
            if any(int(p) in pids for p in _PIDS.findall(line)):
                self.lines.add(" ".join(line.split()[:5]) + " " + " ".join(_PIDS.findall(line)))

    def __enter__(self) -> "Connections":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sample()

    @property
    def elsewhere(self) -> list[str]:
        return sorted(line for line in self.lines if off_loopback(line))


def ss_available() -> bool:
    return subprocess.run(["sh", "-c", "command -v ss"], capture_output=True).returncode == 0 and os.path.isdir("/proc")
