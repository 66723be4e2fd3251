"""The report's side of ``rlprof report --ray``: a Ray process of its own joins the cluster, lists ROOT on
every node and runs the report's passes where the files lie.

``open_session`` starts that process (``cluster``), which is the one to
import Ray and call ``ray.init``; this process never does, so nothing Ray
does (its imports, its threads, what its driver prints) touches the
command's own streams or state. The two talk over pipes (``channel``).
``Session`` is what the report sees: ROOT as the nodes listed it
(``root``, a ``store.listing.ListedPath``, shown as the user wrote it),
``execute`` to run the planned passes on the nodes, and the ``analysis``
and ``notes`` of where each was read.

What Ray's driver prints in the Ray process (a raylet's last log lines
when a node dies: dozens of lines) arrives on a pipe; each message's first
line is kept among the report's notes (``RaysOwnMessages``).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, BinaryIO, Callable, Iterator

from ...store.listing import ListedPath, Listing
from ..analysis import Analysis
from ..passes import PlannedPasses
from ..plan import PassPlan
from .channel import (FAILURES, NEEDS_RAY, ChannelClosed, ChannelTimeout, Kind, NoCluster, RayMissing, Receiver,
                      send)

DEFAULT_TIMEOUT = 600.0
# The Ray process keeps its own deadlines (``--timeout``); one silent this much longer is stuck, and ended.
GRACE_SECONDS = 30.0

__all__ = ["DEFAULT_TIMEOUT", "NoCluster", "RayMissing", "Session", "open_session"]


class RaysOwnMessages:
    """The Ray process's standard output and error, read as they come: the first line of each of Ray's
    messages (up to five) for the report's notes, and the last lines, to say why the process ended if it
    ended before its time."""

    _COLOUR = re.compile(r"\x1b\[[0-9;]*m")

    def __init__(self, stream: BinaryIO) -> None:
        self.firsts: list[str] = []
        self.last: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True, name="rlprof-ray-output")
        self._thread.start()

    def _read(self, stream: BinaryIO) -> None:
        with stream:
            for raw in stream:
                line = self._COLOUR.sub("", raw.decode("utf-8", "replace")).rstrip()
                if line.strip() and not line[0].isspace() and line not in self.firsts and len(self.firsts) < 5:
                    self.firsts.append(line.strip())
                self.last = (self.last + [line])[-5:]

    def join(self, seconds: float) -> None:
        self._thread.join(seconds)


class Session:
    """One report's use of the cluster, through the Ray process: made by ``open_session`` once ROOT is listed."""

    def __init__(self, process: subprocess.Popen, answers: Receiver, ray_said: RaysOwnMessages, *, address: str,
                 timeout: float, progress: Callable[[str], None] | None) -> None:
        self._process, self._answers, self.ray_said = process, answers, ray_said
        self.address, self.timeout = address, timeout
        self.say = progress or (lambda _text: None)
        self.analysis = Analysis("ray")
        self.listing: Listing | None = None
        self._notes: list[str] = []

    @property
    def root(self) -> ListedPath:
        """ROOT as the nodes listed it, shown as the user wrote it: what the report is planned and made over."""
        return self.listing.root

    @property
    def notes(self) -> list[str]:
        """What the listings and passes said (other releases, what was skipped, files differing between
        nodes, passes read on another node), and the first line of each message Ray printed meanwhile."""
        return self._notes + [f"Ray said: {line[:240]}" for line in self.ray_said.firsts]

    def execute(self, plan: PassPlan) -> PlannedPasses:
        """Every planned pass, each on a node that holds its file; their results, to answer the report."""
        try:
            send(self._process.stdin, Kind.READ, traces=[(job.path.rel, job.rank, job.stage) for job in plan.traces],
                 memory=[path.rel for path in plan.memory])
        except OSError:  # the Ray process is gone: why, from what it printed
            raise NoCluster(self._ended("reading")) from None
        fields = self.wait_for(Kind.READ, time.monotonic() + self.timeout + GRACE_SECONDS, "reading")
        return PlannedPasses(self.analysis, fields["traces"], fields["memory"])

    def wait_for(self, kind: Kind, deadline: float, what: str) -> dict[str, Any]:
        """The Ray process's next message of ``kind``, its progress lines said on the way; its failure to join,
        its end, or its silence past ``deadline`` raised as ``NoCluster``."""
        while True:
            try:
                got, fields = self._answers.receive(deadline)
            except ChannelTimeout:
                raise NoCluster(self._silent(what)) from None
            except ChannelClosed:
                raise NoCluster(self._ended(what)) from None
            if got is Kind.SAY:
                self.say(fields["text"])
            elif got is Kind.FAILED:
                raise FAILURES[fields["error"]](fields["message"])
            elif got is kind:
                self._take_account(fields)
                return fields

    def _take_account(self, fields: dict[str, Any]) -> None:
        """The Ray process's account of where passes ran, kept in this session's one ``Analysis``."""
        if "analysis" in fields:
            for field in dataclasses.fields(Analysis):
                if field.name in fields["analysis"]:
                    setattr(self.analysis, field.name, fields["analysis"][field.name])
        if "notes" in fields:
            self._notes = list(fields["notes"])

    def _silent(self, what: str) -> str:
        if what == "joining":  # ray.init waits on a cluster that does not answer, with no end of its own
            return f"--ray {self.address}: the cluster did not answer within --timeout {self.timeout:g} s"
        if what == "starting":
            return f"--ray {self.address}: the Ray process did not start within --timeout {self.timeout:g} s"
        return (f"--ray {self.address}: the Ray process said nothing while {what} for "
                f"{self.timeout + GRACE_SECONDS:g} s; ended")

    def _ended(self, what: str) -> str:
        try:
            code = self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        self.ray_said.join(5)
        last = " | ".join(line.strip() for line in self.ray_said.last if line.strip())
        return (f"--ray {self.address}: the Ray process ended while {what} (exit status {code})"
                + (f": {last[-400:]}" if last else ""))

    def close(self, *, leave: bool) -> None:
        """``leave``: let the Ray process leave the cluster and end (ended if it does not in time); else (a
        failure, an interrupt) end it now."""
        try:
            self._process.stdin.close()
        except OSError:
            pass
        try:
            self._process.wait(timeout=GRACE_SECONDS if leave else 0)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self.ray_said.join(5)
        os.close(self._answers.fd)


@contextmanager
def open_session(root_text: str, address: str = "auto", *, timeout: float = DEFAULT_TIMEOUT, use_cache: bool = True,
                 progress: Callable[[str], None] | None = None) -> Iterator[Session]:
    """Join the Ray cluster at ``address`` (``auto``: the one this machine belongs to, as ``ray.init``
    finds it) from a Ray process of the report's own, list ROOT on every alive node, and leave the cluster
    when done."""
    if importlib.util.find_spec("ray") is None:
        raise RayMissing(NEEDS_RAY)
    read_end, write_end = os.pipe()
    order = {"root": root_text, "address": address, "timeout": timeout, "use_cache": use_cache,
             "parent": os.getpid()}
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "rlprof_plugins.report.on_ray.cluster", str(write_end), json.dumps(order)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, pass_fds=(write_end,))
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    session = Session(process, Receiver(read_end), RaysOwnMessages(process.stdout), address=address,
                      timeout=timeout, progress=progress)
    try:
        started = time.monotonic()
        session.wait_for(Kind.JOINING, started + timeout, "starting")
        session.wait_for(Kind.JOINED, time.monotonic() + timeout, "joining")
        listed = session.wait_for(Kind.LISTED, time.monotonic() + timeout + GRACE_SECONDS, "listing")
        session.listing = Listing.from_plain(listed["listing"])
        yield session
    except BaseException:
        session.close(leave=False)
        raise
    session.close(leave=True)

