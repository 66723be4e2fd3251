"""Kineto's trace writer run in a forked child, so the engine keeps its GIL.

``export_chrome_trace`` is Kineto's C++ writer, but it holds the GIL for the
whole write: no other Python thread of the process runs meanwhile
(docs/performance.md). Run on rlprof's
exporter thread, that stalls the engine thread of the same process for as
long: after a chunked session's stop, once per chunk. The recorded events
live only in this process's memory, so a child made with ``fork`` (a
copy-on-write snapshot, no pickling) writes them and exits; the parent waits
without the GIL. The child runs nothing but the write and ``os._exit``.

Where fork is unavailable, fails, or the child does not produce the file
(killed, timed out, crashed), the write runs here as before: the same file,
only with the stall.
"""

from __future__ import annotations

import os
import signal
import time
import warnings
from pathlib import Path
from typing import Any

from .._log import logger

CHILD_TIMEOUT_S = 600.0
CHILD_NICENESS = 10  # the writer yields the CPU to the engine (on a small host it would slow the next chunk's stop)
IN_PROCESS_ENV = "RLPROF_EXPORT_IN_PROCESS"  # "1": never fork (e.g. where a fork is known to misbehave)


def export_chrome_trace(prof: Any, path: Path, timeout: float = CHILD_TIMEOUT_S) -> str:
    """Write ``prof``'s trace to ``path``; returns where it was written: ``fork`` or ``in-process``."""
    if hasattr(os, "fork") and os.environ.get(IN_PROCESS_ENV) != "1" and _in_child(prof, path, timeout):
        return "fork"
    path.unlink(missing_ok=True)
    prof.export_chrome_trace(str(path))
    return "in-process"


def _in_child(prof: Any, path: Path, timeout: float) -> bool:
    try:
        with warnings.catch_warnings():  # 3.12 warns on forking a threaded process; the child only writes
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
    except OSError as e:
        logger.info("rlprof: cannot fork to write the trace (%s); writing it in this process", e)
        return False
    if pid == 0:  # the child: the write, then out without running anything of the parent's
        code = 1
        try:
            try:  # below the engine: a chunk is written while the engine records the next one
                os.nice(CHILD_NICENESS)
            except OSError:
                pass
            prof.export_chrome_trace(str(path))
            code = 0
        finally:
            os._exit(code)
    status = _wait(pid, timeout)
    if status == 0 and path.exists():
        return True
    logger.warning("rlprof: the forked trace writer %s; writing %s in this process",
                   "timed out" if status is None else f"ended with status {status}", path.name)
    return False


def _wait(pid: int, timeout: float) -> int | None:
    """The child's exit code (None: killed at the timeout; -1: reaped by someone else's SIGCHLD handler)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return -1
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
            return None
        time.sleep(0.005)
