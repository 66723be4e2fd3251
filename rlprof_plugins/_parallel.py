"""How many processes a trace tool uses, and the pool it runs them in.

The tools' work is per-event Python, so threads do not help; ranks are
independent, so one process per rank does, up to the cores this process
may use. Starting a process means a fresh interpreter (``spawn``, since the
caller may be threaded), which costs more than a small input's whole pass, so
small inputs stay in one.
"""

from __future__ import annotations

import os
from concurrent.futures import Executor, ProcessPoolExecutor
from multiprocessing import get_context

# Below this much input (compressed bytes) starting processes costs more than it saves.
PARALLEL_MIN_BYTES = 4 << 20


def usable_cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def processes_for(items: int, total_bytes: int) -> int:
    """One per item up to the usable cores, for inputs worth it."""
    if items < 2 or total_bytes < PARALLEL_MIN_BYTES:
        return 1
    return max(1, min(items, usable_cores()))


def die_with_parent(parent: int) -> None:
    """A worker must not outlive the tool (killed by a timeout, say): an
    orphaned worker waits on its queue for good, or goes on writing. Linux's
    parent-death signal ends it with its parent; a parent gone before the
    signal was armed shows as a changed parent pid."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(1)


def pool(processes: int) -> Executor:
    return ProcessPoolExecutor(max_workers=processes, mp_context=get_context("spawn"),
                               initializer=die_with_parent, initargs=(os.getpid(),))
