"""torch's stop off the engine thread: the engine ends a recording in a millisecond, torch post-processes
it on a thread of its own without the GIL.

torch's ``_disable_profiler()`` does two things in one call: it removes the recording callbacks and
pops the session (cheap), then post-processes every recorded operator into the trace (3-5 us an
operator: 100 ms and more for a burst of SGLang's CPU decode iterations, docs/performance.md). Its
Python binding holds the GIL throughout, and the session it pops belongs to the thread that started it
(thread-local), so the engine thread had to pay all of it. Two things in torch make it movable:

- ``_ExperimentalConfig(profile_all_threads=True)`` keeps the session in torch's global profiler state
  (any thread may end it) and records through global callbacks (the engine thread's operators as
  before; any other thread's too, where one runs operators);
- the C++ functions behind the binding are exported from ``libtorch_cpu``: called through ``ctypes``,
  which releases the GIL for a foreign call, the post-processing and Kineto's trace writer run beside
  the engine instead of in its way.

So at a stop, on the engine thread: torch's Python stop runs as usual (a device sync where it has one,
its bookkeeping), but where it calls ``_disable_profiler()`` it calls ``DetachedStop.detach`` instead:
the running session's callbacks are removed there and then (nothing records after this returns, so
nothing writes into what the other thread reads), and a thread ends the session (``disableProfiler``). The recording
is then written by ``DetachedStop.save`` (Kineto's writer, again without the GIL: no forked child
needed) and freed. torch's profiler is one per process: the next session's start waits for an ended
one that is still post-processing (``wait_in_flight``), a pause the trace shows like any other.

What it relies on, checked before it is used (``why_not``), else torch's own stop runs as before:
the C++ symbols below (their Itanium-ABI shapes: a ``unique_ptr`` returned through a hidden pointer,
``std::string`` of the C++11 ABI, 64-bit pointers), verified on torch 2.13 (``VERIFIED_TORCH``); only
CPU activities (a CUDA or XPU session ends through CUPTI's own flush, not verified here without a
GPU); no exact stacks (the Python tracer's events need the GIL) and no operator table (torch's event
objects are built by the binding). ``RLPROF_STOP_ON_ENGINE_THREAD=1`` turns it off.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
import threading
import time
from pathlib import Path
from typing import Any, Sequence

from .._log import logger

OFF_ENV = "RLPROF_STOP_ON_ENGINE_THREAD"  # "1": torch's stop runs on the engine thread, as torch does it
VERIFIED_TORCH = ("2.13",)  # torch releases whose symbols and shapes below were checked (major.minor)

# the C++ functions, by their mangled names in libtorch_cpu.so (torch 2.13)
_DISABLE = "_ZN5torch8autograd8profiler15disableProfilerEv"  # std::unique_ptr<ProfilerResult> disableProfiler()
_STATE = "_ZN5torch8profiler4impl17ProfilerStateBase3getEb"  # static ProfilerStateBase* get(bool global)
_REMOVE_CALLBACK = "_ZN5torch8profiler4impl17ProfilerStateBase14removeCallbackEv"  # void removeCallback()
_SAVE = ("_ZN5torch8autograd8profiler14ProfilerResult4saveERKNSt7__cxx1112basic_stringIcSt11char_traitsIcE"
         "SaIcEEE")  # void ProfilerResult::save(const std::string&)
_DESTROY = "_ZN5torch8autograd8profiler14ProfilerResultD1Ev"  # ProfilerResult::~ProfilerResult()
_DELETE = "_ZdlPv"  # operator delete(void*), libstdc++'s


class _CxxString(ctypes.Structure):
    """libstdc++'s ``std::string`` (C++11 ABI): data pointer, length, 16 bytes of small-string buffer or
    capacity. Made here only to be read through a ``const&``: never destroyed by C++."""
    _fields_ = [("data", ctypes.c_void_p), ("size", ctypes.c_size_t), ("local", ctypes.c_char * 16)]


class _Symbols:
    def __init__(self, torch: Any) -> None:
        lib = ctypes.CDLL(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"))
        self.disable = _function(lib, _DISABLE, ctypes.c_void_p, [ctypes.c_void_p])
        self.state = _function(lib, _STATE, ctypes.c_void_p, [ctypes.c_bool])
        self.remove_callback = _function(lib, _REMOVE_CALLBACK, None, [ctypes.c_void_p])
        self.save = _function(lib, _SAVE, None, [ctypes.c_void_p, ctypes.c_void_p])
        self.destroy = _function(lib, _DESTROY, None, [ctypes.c_void_p])
        self.delete = _function(lib, _DELETE, None, [ctypes.c_void_p])  # from torch's own libstdc++


def _function(lib: Any, name: str, restype: Any, argtypes: list) -> Any:
    f = getattr(lib, name)  # AttributeError: not exported by this build
    f.restype, f.argtypes = restype, argtypes
    return f


_FOUND: dict = {}  # "symbols"/"why": what this process found, once


def why_not(torch: Any, activities: Sequence[str]) -> str | None:
    """Why torch's stop cannot be detached here (None: it can)."""
    if os.environ.get(OFF_ENV) == "1":
        return f"{OFF_ENV}=1"
    if tuple(activities) != ("CPU",):
        return f"activities {', '.join(activities)}: only CPU recordings are verified off the engine thread"
    if "why" not in _FOUND:
        _FOUND["why"] = _probe(torch)
    return _FOUND["why"]


def _probe(torch: Any) -> str | None:
    version = ".".join(str(torch.__version__).split("+")[0].split(".")[:2])
    if version not in VERIFIED_TORCH:
        return f"torch {torch.__version__} is not among the verified releases ({', '.join(VERIFIED_TORCH)})"
    if platform.system() != "Linux" or struct.calcsize("P") != 8:
        return f"{platform.system()} with {8 * struct.calcsize('P')}-bit pointers (verified: 64-bit Linux)"
    if not getattr(torch, "compiled_with_cxx11_abi", lambda: False)():
        return "torch is built without the C++11 ABI"
    try:
        torch._C._profiler._ExperimentalConfig(trace_only=True, profile_all_threads=True)
        getattr(torch.autograd.profiler, "_disable_profiler")
        _FOUND["symbols"] = _Symbols(torch)
    except (AttributeError, TypeError, OSError) as e:
        return f"{type(e).__name__}: {e}"
    return None


def config(torch: Any) -> Any:
    """The experimental config a detachable session records with (``why_not`` said None)."""
    return torch._C._profiler._ExperimentalConfig(trace_only=True, profile_all_threads=True)


GRACE_S = 0.005  # between the callbacks' removal and the post-processing (``_post_process``)
NICENESS = 10  # the trace writer yields the CPU to the engine, as the forked one does (``save``)


def _below_the_engine() -> None:
    """This thread only (Linux: ``setpriority`` of thread 0 is the caller) runs below the engine."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, min(os.getpriority(os.PRIO_PROCESS, 0) + NICENESS, 19))
    except (AttributeError, OSError):
        pass


def _below_then(call: Any, *args: Any) -> None:
    """``call(*args)`` on this (short-lived) thread, below the engine."""
    _below_the_engine()
    call(*args)


_IN_FLIGHT: list["DetachedStop"] = []  # the stops still post-processing (torch's profiler is one a process)
_SWAP = threading.Lock()


def wait_in_flight() -> None:
    """Before a session starts: any ended one still post-processing finishes first (the GIL is free
    meanwhile)."""
    for ended in list(_IN_FLIGHT):  # (each leaves the list from its own thread as it finishes)
        ended.wait()


def stop(torch: Any, prof: Any) -> "DetachedStop":
    """End ``prof`` (a ``torch.profiler.profile`` started with ``config``) on this thread in a millisecond;
    its post-processing runs on a thread of its own. torch's Python stop runs as it is, with
    ``_disable_profiler`` standing in for a moment by ``DetachedStop.detach``."""
    symbols = _FOUND["symbols"]
    detached = DetachedStop(symbols)
    module = torch.autograd.profiler
    with _SWAP:
        native = module._disable_profiler
        module._disable_profiler = lambda: detached.detach(native)
        try:
            prof.stop()
        finally:
            module._disable_profiler = native
            if not detached.ended:  # torch's stop never came to end a session: nothing to wait for
                detached.error = detached.error or "torch's stop ended no profiler session"
                detached._done.set()
    return detached


class DetachedStop:
    """One session's end, post-processed by a thread of its own; ``save`` writes its trace, ``release``
    frees it (both without the GIL)."""

    def __init__(self, symbols: _Symbols) -> None:
        self._symbols = symbols
        self._done = threading.Event()
        self._result: int | None = None  # the C++ ProfilerResult*
        self._lock = threading.Lock()
        # the post-processing's CPU seconds, once done: what it holds a core for, so what the same stop
        # in place would cost the engine (its wall time, beside whatever else runs, says more of the
        # host than of the chunk)
        self.seconds: float | None = None
        self.native: Any = None  # torch's own result where the session could not be detached
        self.error: str | None = None
        self.ended = False  # torch's stop came to end the session (``detach``)

    def detach(self, native: Any) -> Any:
        """In place of torch's ``_disable_profiler()``, on the engine thread: the callbacks off, the rest
        on a thread. A session torch keeps elsewhere than its global state ends the native way."""
        self.ended = True
        s = self._symbols
        state = s.state(True)
        if not state:
            logger.info("rlprof: no global profiler session to detach; torch's stop runs here")
            self.native = native()
            self._done.set()
            return self.native
        s.remove_callback(state)  # nothing records from here: nothing writes into what the thread reads
        _IN_FLIGHT.append(self)
        try:
            threading.Thread(target=self._post_process, name="rlprof-torch-stop", daemon=True).start()
        except RuntimeError:  # no thread to be had: post-processed here, as torch's own stop would be
            self._post_process()
        return None

    def _post_process(self) -> None:
        # at the engine's own priority: the next chunk's start waits for it (a burst that comes while
        # it runs waits on it; below the engine, beside its other processes, that wait was twice as long)
        # torch 2.13 ends a session recorded on all threads without waiting for a callback another thread
        # may be running as the callbacks go (later torch drains them): one has finished by now
        time.sleep(GRACE_S)
        began = time.thread_time()
        slot = ctypes.c_void_p()
        try:
            self._symbols.disable(ctypes.addressof(slot))  # the GIL is released for the call
            self._result = slot.value
            if not self._result:
                self.error = "torch's stop returned no recording"
        except Exception as e:  # ctypes' own errors; a C++ exception would not come back
            self.error = f"{type(e).__name__}: {e}"
        finally:
            self.seconds = time.thread_time() - began
            self._done.set()
            try:
                _IN_FLIGHT.remove(self)
            except ValueError:
                pass

    def wait(self) -> None:
        self._done.wait()

    def save(self, path: Path) -> None:
        """Write the trace to ``path`` (Kineto's writer, as ``export_chrome_trace``), waiting for the
        post-processing first; on a thread of its own below the engine, as the forked writer was."""
        self.wait()
        with self._lock:
            if not self._result:
                raise RuntimeError(self.error or "the recording was already released")
            raw = os.fsencode(str(path))
            buffer = ctypes.create_string_buffer(raw)
            text = _CxxString(ctypes.cast(buffer, ctypes.c_void_p).value, len(raw))
            args = (self._result, ctypes.addressof(text))
            writer = threading.Thread(target=_below_then, args=(self._symbols.save, *args), name="rlprof-trace-writer")
            try:
                writer.start()
            except RuntimeError:  # no thread to be had: written on this one (still without the GIL)
                self._symbols.save(*args)
            else:
                writer.join()

    def release(self) -> None:
        """Free the recording (once written, or abandoned)."""
        self.wait()
        with self._lock:
            result, self._result = self._result, None
        if result:
            self._symbols.destroy(result)
            self._symbols.delete(result)
            _return_freed_memory()


def _return_freed_memory() -> None:
    """glibc keeps what a recording freed in its arenas: give it back to the system (without the GIL), so
    the engine's resident size after a chunk is what it was before (measured: 427 -> 370 MB after six
    chunks of 24,000 operators; the peak is the same)."""
    trim = _FOUND.get("trim")
    if trim is None:
        try:
            trim = ctypes.CDLL("libc.so.6").malloc_trim
            trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
        except (OSError, AttributeError):  # not glibc
            trim = False
        _FOUND["trim"] = trim
    if trim:
        trim(0)

    def __del__(self) -> None:  # a recording never exported (a failed session) is still freed
        try:
            if self._done.is_set():
                self.release()
        except Exception:
            pass
