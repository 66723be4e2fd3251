"""torch's stop off the engine thread: the engine ends a recording in a millisecond, torch post-processes it on a
thread of its own without the GIL.

torch's ``_disable_profiler()`` does two things in one call: it takes the session off the thread and removes its
callbacks (cheap), then post-processes every recorded operator into the trace (microseconds an operator, so a
pause the engine feels after a busy stretch: docs/performance.md). Its Python binding holds the GIL throughout,
on the thread that recorded, so the engine thread would pay all of it. The shim (``torch_shim``) splits
the two halves through torch's own C++ API, each call catching what torch throws:

- on the engine thread, where torch's Python stop calls ``_disable_profiler()``, ``DetachedStop.detach`` takes
  the session off the thread and removes its callbacks instead. The session records thread-locally (torch's
  default, as the engines' native profilers record), so the engine thread is the only one running its callbacks:
  once ``detach`` returns, none is running and none will;
- on a thread of its own, ``DetachedStop`` waits until nothing else owns the session (a task that inherited the
  engine thread's state while it recorded holds it until it ends: counted, not guessed), then torch's own
  ``disableProfiler`` post-processes it there;
- ``DetachedStop.save`` writes the trace (Kineto's writer, as ``export_chrome_trace``) and ``release`` frees it,
  both without the GIL; ``abandon`` frees what a failed session never writes.

torch's profiler is one a process: the next session's start waits for an ended one still post-processing
(``wait_in_flight``), a pause the trace shows like any other. The threads are not daemons: an interpreter that
exits joins a stop still post-processing before torch's static destructors run.

Used where ``why_not`` says so: only CPU activities (a CUDA or XPU session ends through CUPTI's own flush, not
proven here without a GPU), no exact stacks and no operator table (the callers' rule), ``RLPROF_STOP_ON_ENGINE_THREAD``
unset, and the shim built and proven for this torch (``torch_shim.why_not``). Where the shim cannot take the
session (an error, torch drift), torch's own stop runs there and then, as it would without rlprof.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Sequence

from .._log import logger
from . import torch_shim

OFF_ENV = "RLPROF_STOP_ON_ENGINE_THREAD"  # "1": torch's stop runs on the engine thread, as torch does it
FINISH_TIMEOUT_S = 60.0  # how long another owner of an ended session is waited for before it is given up
NICENESS = 10  # the trace writer yields the CPU to the engine, as the forked one does (``save``)


def why_not(torch: Any, activities: Sequence[str], *, build: bool = True,
            facts: dict[str, Any] | None = None) -> str | None:
    """Why torch's stop cannot be detached here (None: it can). ``build``: where only the shim is missing, build it
    in the background for later sessions (``torch_shim.build_in_background``; doctor only reports). ``facts``:
    another machine's or torch's (``torch_shim.torch_facts``), for the tests of the gate."""
    import os

    if os.environ.get(OFF_ENV) == "1":
        return f"{OFF_ENV}=1"
    if tuple(activities) != ("CPU",):
        return f"activities {', '.join(activities)}: only CPU recordings are proven off the engine thread"
    why = torch_shim.why_not(torch, facts)
    if build and facts is None and why is not None and torch_shim.build_in_background(torch):
        why = torch_shim.why_not(torch)  # (a build now under way)
    return why


def config(torch: Any) -> Any:
    """The experimental config a detachable session records with: no event objects at the stop (``trace_only``),
    and thread-local (no ``profile_all_threads``), so only the engine thread runs its callbacks."""
    return torch._C._profiler._ExperimentalConfig(trace_only=True)


def owners(shim: "torch_shim.Shim") -> int:
    """Right after the profiler started, on its thread: what ``finish`` waits to be back to."""
    return shim.owners()


def _below_the_engine() -> None:
    """This thread only (Linux: ``setpriority`` of thread 0 is the caller) runs below the engine."""
    import os

    try:
        os.setpriority(os.PRIO_PROCESS, 0, min(os.getpriority(os.PRIO_PROCESS, 0) + NICENESS, 19))
    except (AttributeError, OSError):
        pass


_IN_FLIGHT: list["DetachedStop"] = []  # the stops still post-processing (torch's profiler is one a process)
_SWAP = threading.Lock()


def wait_in_flight() -> None:
    """Before a session starts: any ended one still post-processing finishes first (the GIL is free meanwhile)."""
    for ended in list(_IN_FLIGHT):  # (each leaves the list from its own thread as it finishes)
        ended.wait()


def stop(torch: Any, prof: Any, shim: "torch_shim.Shim", session_owners: int) -> "DetachedStop":
    """End ``prof`` (a ``torch.profiler.profile`` started with ``config``) on this thread in a millisecond; its
    post-processing runs on a thread of its own. torch's Python stop runs as it is, with ``_disable_profiler``
    standing in for a moment by ``DetachedStop.detach``. Whether it left the thread: ``DetachedStop.detached``."""
    detached = DetachedStop(shim, session_owners)
    module = torch.autograd.profiler
    with _SWAP:
        native = module._disable_profiler
        module._disable_profiler = lambda: detached.detach(native)
        try:
            prof.stop()
        finally:
            module._disable_profiler = native
    if not detached.asked:
        # torch's stop ended the session without its ``_disable_profiler`` (torch drift): torch's own result is on
        # ``prof`` as ever, and is what gets written
        logger.warning("rlprof: torch's stop did not call torch.autograd.profiler._disable_profiler; its own "
                       "result is written (the stop ran on the engine thread)")
    return detached


class DetachedStop:
    """One session's end: ``detach`` (the engine thread), torch's post-processing on a thread of its own, ``save``
    and ``release`` (without the GIL), or ``abandon``."""

    def __init__(self, shim: "torch_shim.Shim", session_owners: int) -> None:
        self._shim = shim
        self._owners = session_owners
        self._done = threading.Event()
        self._handle: int | None = None  # the session taken off the engine thread
        self._result: int | None = None  # torch's recording, once post-processed
        self._lock = threading.Lock()
        # the post-processing's CPU seconds, once done: what it holds a core for, so what the same stop in place
        # would cost the engine
        self.seconds: float | None = None
        self.native: Any = None  # torch's own result where the session could not be detached
        self.error: str | None = None
        self.asked = False  # torch's stop called ``_disable_profiler`` (``detach``)
        self.detached = False  # the session left the engine thread (else torch's own stop ran on it)

    def detach(self, native: Any) -> Any:
        """In place of torch's ``_disable_profiler()``, on the engine thread: the session off this thread and its
        callbacks removed, the rest on a thread. Where the shim cannot take it, torch's own stop runs here."""
        self.asked = True
        try:
            self._handle = self._shim.detach(self._owners)
        except torch_shim.ShimError as e:
            self._done.set()
            if not self._shim.has_session():  # torch's own stop would end the process here: said, not called
                self.error = f"the profiler session ended elsewhere before rlprof's stop ({e})"
                raise RuntimeError(self.error) from None
            logger.warning("rlprof: torch's stop runs on the engine thread: the shim could not take the session: %s",
                           e)
            self.native = native()
            return self.native
        self.detached = True
        _IN_FLIGHT.append(self)
        try:
            threading.Thread(target=self._post_process, name="rlprof-torch-stop", daemon=False).start()
        except RuntimeError:  # no thread to be had: post-processed here, as torch's own stop would be
            self._post_process()
        return None

    def _post_process(self) -> None:
        # at the engine's own priority: the next chunk's start waits for it
        began = time.thread_time()
        handle, self._handle = self._handle, None
        try:
            self._result = self._shim.finish(handle, FINISH_TIMEOUT_S)  # the GIL is released for the call
        except torch_shim.ShimError as e:
            self.error = f"torch's post-processing failed: {e}"
        finally:
            self.seconds = time.thread_time() - began
            self._done.set()
            try:
                _IN_FLIGHT.remove(self)
            except ValueError:
                pass

    def wait(self) -> None:
        self._done.wait()

    @property
    def done(self) -> bool:
        """Whether torch's post-processing has finished (or failed): the next session can start at once."""
        return self._done.is_set()

    def save(self, path: Path) -> None:
        """Write the trace to ``path`` (Kineto's writer, as ``export_chrome_trace``), waiting for the
        post-processing first; on a thread of its own below the engine, as the forked writer was. Raises
        ``torch_shim.ShimError`` where torch failed or wrote nothing (a full disk, a folder it may not write)."""
        self.wait()
        with self._lock:
            if not self._result:
                raise torch_shim.ShimError(self.error or "the recording was already released")
            failed: list[BaseException] = []

            def write() -> None:
                _below_the_engine()
                try:
                    self._shim.save(self._result, path)
                except BaseException as e:  # handed to the caller's thread
                    failed.append(e)

            writer = threading.Thread(target=write, name="rlprof-trace-writer", daemon=False)
            try:
                writer.start()
            except RuntimeError:  # no thread to be had: written on this one (still without the GIL)
                write()
            else:
                writer.join()
            if failed:
                raise failed[0]
            if not _written_whole(path):
                raise torch_shim.ShimError(f"torch's trace writer left no whole trace at {path} (a full disk, a "
                                           "folder it may not write)")

    def release(self) -> None:
        """Free the recording (once written, or abandoned); a session still detached is given up."""
        self.wait()
        with self._lock:
            result, self._result = self._result, None
            handle, self._handle = self._handle, None
        if handle:
            self._shim.drop(handle)
        if result:
            self._shim.free(result)
            return_freed_memory()

    abandon = release  # a failed session's recording is freed, never kept in the process


def _written_whole(path: Path) -> bool:
    """Whether Kineto's writer left a whole trace at ``path``: it logs a file it cannot open or write, and still
    renames what it wrote into place, so a full disk leaves a cut one. A whole one ends with its ``traceName``."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            f.seek(max(0, size - 8192))
            tail = f.read().rstrip()
    except OSError:
        return False
    return tail.endswith(b"}") and b'"traceName"' in tail


_TRIM: list[Any] = []


def return_freed_memory() -> None:
    """glibc keeps what a recording freed in its arenas: give it back to the system (without the GIL), so the
    engine's resident size after a chunk is what it was before, not what the chunk's post-processing left
    behind (docs/performance.md)."""
    import ctypes

    if not _TRIM:
        try:
            trim = ctypes.CDLL("libc.so.6").malloc_trim
            trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
        except (OSError, AttributeError):  # not glibc
            trim = None
        _TRIM.append(trim)
    if _TRIM[0] is not None:
        _TRIM[0](0)
