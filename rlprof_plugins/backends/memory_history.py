"""The device allocator's memory history over a session's window: PyTorch's memory snapshot.

Beside the trace backend, not instead of it: a session with ``memory`` asks
each rank's caching allocator to record every allocation and free (with the
Python frames that made it) from the window's first iteration, and at the
window's end takes the snapshot (the allocator's segments and that history),
stops recording and writes it as ``memory/<rank>.pickle`` of the step
folder, the file PyTorch's memory viewer and ``rlprof report`` read.

Where each part runs, and why:
- ``start`` and ``snapshot`` run on the engine thread, at iteration
  boundaries (the allocator is the engine's; disabling the history clears
  it, so the snapshot must come first). ``snapshot`` turns the C++ history
  into Python objects while holding the GIL: a pause the recording marks in
  the trace (``trace.format.pauses.MEMORY``).
- ``export`` pickles and writes on the exporter thread: atomically, with
  protocol 4 (PyTorch's viewer shows nothing for protocol 5 pickles).

The allocator's module is ``torch.cuda.memory`` on CUDA and torch_npu's
``torch.npu.memory`` on Ascend (the same three functions:
``_record_memory_history``, ``_snapshot``); no other device keeps such a
history, so a host without one refuses ``memory`` naming the key or field.
Defaults are the safe ones: ``stacks="python"`` (C++ frames made one dump
take minutes instead of seconds on 8 GPUs, torchtitan PR 3628) and
100,000 entries (the ring buffer keeps the newest).
"""

from __future__ import annotations

import contextlib
import pickle
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import OptionsError
from ..atomic_files import atomic_target, publish
from . import ExportedFile

STACKS = ("python", "all")  # the allocator's traceback choices; "all" adds C++ frames (slow to dump)
# the configuration keys and their defaults (checked by ``config.options`` with its own checks)
DEFAULTS = {"memory": False, "memory_stacks": "python", "memory_max_entries": 100_000}
PICKLE_PROTOCOL = 4
MEMORY_DEVICES = ("cuda", "npu")


@dataclass(frozen=True)
class MemorySettings:
    stacks: str = DEFAULTS["memory_stacks"]
    max_entries: int = DEFAULTS["memory_max_entries"]


def allocator_module(device: str) -> Any | None:
    """The module of ``device``'s caching allocator that keeps a history, or None."""
    if device == "cuda":
        import torch

        return torch.cuda.memory
    if device == "npu" and "torch_npu" in sys.modules:
        import torch

        return getattr(getattr(torch, "npu", None), "memory", None)
    return None


def unavailable(device: str) -> str | None:
    """Why ``memory`` cannot be recorded on a host of ``device`` (``backends.which_backend.device_type``), or None."""
    if device not in MEMORY_DEVICES:
        return (f"needs a device whose allocator keeps a memory history (CUDA, or Ascend with torch_npu); "
                f"this host's device is {device}")
    module = allocator_module(device)
    missing = [f for f in ("_record_memory_history", "_snapshot") if not hasattr(module, f)]
    if module is None or missing:
        return f"needs {device}'s allocator history API, which this torch lacks ({', '.join(missing) or 'no module'})"
    return None


def host_allocator() -> Any | None:
    """This process's allocator module with a history (``allocator_module`` of its device)."""
    from .which_backend import device_type

    return allocator_module(device_type())


def check_configured(options: Any, device: str) -> None:
    """At start-up: ``memory: true`` in the configuration needs such a device here."""
    if getattr(options, "memory", False):
        why = unavailable(device)
        if why:
            raise OptionsError("memory", why)


class MemoryHistory:
    """One rank's allocator history over one session's window.

    ``api``: the allocator module (``allocator_module``; tests pass a
    stand-in that mirrors ``torch.cuda.memory``'s signatures)."""

    def __init__(self, api: Any, settings: MemorySettings) -> None:
        if api is None:
            raise RuntimeError("memory: this process's device keeps no allocator history (CUDA, or Ascend with "
                               "torch_npu)")
        self._api = api
        self.settings = settings
        self._snapshot: Mapping[str, Any] | None = None
        self.recording = False
        self.report: dict[str, Any] = {}

    @property
    def taken(self) -> bool:
        """A snapshot is held, not yet written."""
        return self._snapshot is not None

    def start(self) -> None:
        # the arguments torch.cuda.memory and torch_npu's torch.npu.memory share
        self._api._record_memory_history(enabled="all", context="all", stacks=self.settings.stacks,
                                         max_entries=self.settings.max_entries)
        self.recording = True

    def snapshot(self) -> None:
        """Take the window's snapshot, then stop recording (engine thread, at an iteration boundary)."""
        t0 = time.perf_counter()
        try:
            self._snapshot = self._api._snapshot()
        finally:
            self.stop()
        traces = (self._snapshot or {}).get("device_traces") or []
        self.report = {"snapshot_seconds": time.perf_counter() - t0,
                       "entries": sum(len(t) for t in traces), "max_entries": self.settings.max_entries,
                       "stacks": self.settings.stacks}

    def stop(self) -> None:
        """Stop recording (also after a failure); the history goes with it."""
        if self.recording:
            self.recording = False
            self._api._record_memory_history(enabled=None)

    def export(self, final: Path) -> ExportedFile | None:
        """Write the snapshot taken by ``snapshot`` to ``final`` (any thread), atomically."""
        if self._snapshot is None:
            return None
        t0 = time.perf_counter()
        tmp = atomic_target(final)
        try:
            with open(tmp, "wb") as f:
                pickle.dump(self._snapshot, f, protocol=PICKLE_PROTOCOL)
            publish(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)
        self._snapshot = None  # the file holds it now; a rank's host memory is not kept twice
        self.report.update(dump_seconds=time.perf_counter() - t0, bytes=final.stat().st_size)
        return ExportedFile(final, "memory")


class TraceOff:
    """The backend of a session that records the memory history alone (SGLang's
    ``activities: ["MEM"]``): no profiler runs, no trace is written."""

    chunkable = False

    def prepare(self, directory: Path, worker_name: str, scratch: Path | None = None) -> None: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def annotation(self, name: str) -> contextlib.nullcontext:
        return contextlib.nullcontext()

    def export(self, place: Any, worker_name: str, *, by_stage: bool = False, pauses: Sequence[Any] = ()) -> list:
        return []
