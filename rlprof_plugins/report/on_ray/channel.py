"""What the report's process and its Ray process say to each other, and how.

``rlprof report --ray`` joins the cluster from a child process of its own
(``cluster``) so that nothing Ray does touches the report's process: not its
imports, not its streams. The two talk over pipes, one message at a time:
each message is a dict in the report's plain-data format (``report.wire``)
after its length in eight bytes. A message's ``kind`` is one of ``Kind``.
"""

from __future__ import annotations

import os
import select
import time
from enum import Enum
from typing import Any, BinaryIO

from ..wire import pack, unpack

_LENGTH = 8


NEEDS_RAY = "--ray needs Ray: pip install 'rlprof-plugins[ray]'"


class RayMissing(RuntimeError):
    """Ray is not installed where the command runs (said as ``NEEDS_RAY``)."""


class NoCluster(RuntimeError):
    """No Ray cluster could be joined at the address."""


# The joining failures the Ray process reports by name, raised again in the report's process.
FAILURES: dict[str, type[RuntimeError]] = {"RayMissing": RayMissing, "NoCluster": NoCluster}


class Kind(str, Enum):
    """What a message carries."""

    SAY = "say"  # a progress line (``text``)
    FAILED = "failed"  # joining failed: ``error`` (a name in FAILURES) and ``message``
    JOINING = "joining"  # the Ray process started and is calling ``ray.init``
    JOINED = "joined"  # ``ray.init`` returned
    LISTED = "listed"  # ROOT as the nodes list it: ``listing``, ``analysis``, ``notes``
    READ = "read"  # an order to run passes (``traces``, ``memory``), or their results (``traces``, ``memory``,
    # ``analysis``, ``notes``)


class ChannelClosed(EOFError):
    """The other process closed its end (it ended)."""


class ChannelTimeout(TimeoutError):
    """No whole message came before the deadline."""


def send(stream: BinaryIO, kind: Kind, **fields: Any) -> None:
    blob = pack({"kind": kind.value, **fields})
    stream.write(len(blob).to_bytes(_LENGTH, "big") + blob)
    stream.flush()


class Receiver:
    """Messages from a pipe's read end, each waited for until a deadline (``time.monotonic``)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = bytearray()

    def receive(self, deadline: float | None = None) -> tuple[Kind, dict[str, Any]]:
        """The next message's kind and fields."""
        header = self._take(_LENGTH, deadline)
        message = unpack(bytes(self._take(int.from_bytes(header, "big"), deadline)))
        return Kind(message.pop("kind")), message

    def _take(self, size: int, deadline: float | None) -> bytearray:
        while len(self._buffer) < size:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                    raise ChannelTimeout("no answer before the deadline")
            chunk = os.read(self.fd, max(size - len(self._buffer), 1 << 16))
            if not chunk:
                raise ChannelClosed("the other end closed the pipe")
            self._buffer += chunk
        taken = self._buffer[:size]
        del self._buffer[:size]
        return taken
