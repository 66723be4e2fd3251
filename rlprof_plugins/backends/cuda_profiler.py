"""The cuda backend: Nsight Systems records, rlprof marks the window.

Chosen by vLLM's ``"profiler": "cuda"`` and SGLang's ``CUDA_PROFILER`` activity
(or ``backend: "cuda"``). nsys, not rlprof, records and names its report
files; what a session gives it, on every rank:

- one NVTX range in the domain ``rlprof`` named with the session's step
  (``global_step_37``): a start/end range, process-wide, so
  ``nsys --capture-range=nvtx --nvtx-capture=global_step_37@rlprof`` captures by it;
- inside it one push/pop range per recorded iteration, named as in torch
  traces (``rlprof::iteration N [stage] ...``), on the engine thread;
- where this process sees CUDA, one ``cudaProfilerStart``/``cudaProfilerStop``
  pair around the session (torch's binding, ``torch.cuda.cudart()``), so
  ``--capture-range=cudaProfilerApi --capture-range-end=repeat`` makes one
  report per session. Capture ranges are counted per process
  (``capture_range``), which is how a report is matched to its step. Without
  CUDA the calls are skipped with one warning; the NVTX ranges still appear.

``export`` writes one small JSON per rank (``<worker>.nsys.json``, kind
``nsys_capture``) saying all this, with the nsys command lines. The NVTX calls
go through the ``nvtx`` package (NVTX v3; a no-op until a tool such as nsys is
attached): docs/nsys.md, "Cost".
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any, Sequence

from .._log import warn_once
from ..store.layout import Placement
from ..atomic_files import write_text_atomic
from ..stages import ITERATION_PREFIX
from . import ExportedFile
from .kind import BackendKind

DOMAIN = "rlprof"
CAPTURE_KIND = "nsys_capture"
SUFFIX = ".nsys.json"

_captures = itertools.count(1)  # this process's cudaProfilerStart calls, as nsys counts its capture ranges
_captures_lock = threading.Lock()


def cuda_runtime() -> Any:
    """torch's binding of the CUDA runtime where this process sees a device, else None.
    (``torch.cuda.cudart()``: ``cudaProfilerStart()``/``cudaProfilerStop()`` return a ``cudaError_t``.)"""
    import torch

    return torch.cuda.cudart() if torch.cuda.is_available() else None


def step_range_name(global_step: int | None, session_id: str) -> str:
    """The session's NVTX range: its step, as nsys users name it in ``--nvtx-capture``."""
    return f"global_step_{global_step}" if global_step is not None else f"rlprof_session_{session_id}"


def nsys_commands(range_name: str) -> dict[str, str]:
    """The two ways to capture this session with nsys (docs/nsys.md)."""
    common = "nsys profile --trace=cuda,nvtx,osrt -o rlprof_%n"
    return {"cudaProfilerApi": f"{common} --capture-range=cudaProfilerApi --capture-range-end=repeat",
            "nvtx": f"{common} --capture-range=nvtx --nvtx-capture='{range_name}@{DOMAIN}' --capture-range-end=stop"}


def _check(code: Any, call: str) -> None:
    if code not in (0, None) and int(code) != 0:
        raise RuntimeError(f"{call} returned CUDA error {int(code)}")


class CudaProfilerBackend:
    """One session's NVTX ranges and capture range (see the module's docstring)."""

    def __init__(self, runtime: Any = cuda_runtime, extra_metadata: dict[str, str] | None = None) -> None:
        self._runtime_of = runtime
        self.extra_metadata = dict(extra_metadata or {})
        self.range_name = step_range_name(None, "")
        self.global_step: int | None = None
        self._range: Any = None
        self._capture: int | None = None
        self._skipped: str | None = None
        self._runtime: Any = None
        self._iterations = [0, None, None]  # count, first, last: a long session keeps no list
        self._times: dict[str, int] = {}

    def name_session(self, global_step: int | None, session_id: str) -> None:
        """The step this session records (called before ``start``)."""
        self.global_step = global_step
        self.range_name = step_range_name(global_step, session_id)

    def prepare(self, directory: Path, worker_name: str, scratch: Path | None = None) -> None:
        """Nothing is written while recording: nsys holds the data."""

    def start(self) -> None:
        domain = nvtx_domain()
        self._runtime = self._runtime_of()
        self._times["started_ns"] = time.time_ns()
        self._range = domain.start_range(domain.get_event_attributes(message=self.range_name))
        if self._runtime is None:
            self._skipped = "this process sees no CUDA device: cudaProfilerStart/Stop skipped; NVTX ranges only"
            warn_once("cuda-capture", "rlprof: the cuda backend records NVTX ranges only here: %s", self._skipped)
            return
        with _captures_lock:
            try:
                _check(self._runtime.cudaProfilerStart(), "cudaProfilerStart")
            except BaseException:
                domain.end_range(self._range)
                raise
            self._capture = next(_captures)

    def annotation(self, name: str):
        """An iteration's NVTX range. torch's ``ProfilerStep#N`` (for HolisticTraceAnalysis in torch
        traces) says nothing more in nsys, so only rlprof's own ranges are emitted."""
        if not name.startswith(ITERATION_PREFIX):
            return contextlib.nullcontext()
        index = name[len(ITERATION_PREFIX):].split(maxsplit=1)
        if index and index[0].isdigit():
            its = self._iterations
            its[0] += 1
            its[1] = int(index[0]) if its[1] is None else its[1]
            its[2] = int(index[0])
        return _NvtxRange(name)

    def stop(self) -> None:
        try:
            if self._runtime is not None and self._capture is not None:
                _check(self._runtime.cudaProfilerStop(), "cudaProfilerStop")
        finally:
            self._times["stopped_ns"] = time.time_ns()
            nvtx_domain().end_range(self._range)

    def export(self, place: Placement, worker_name: str, *, by_stage: bool = False,
               pauses: Sequence[Any] = ()) -> list[ExportedFile]:
        """One JSON per rank: which capture range and NVTX range hold this session (nsys writes the report)."""
        directory = place.ranks()
        directory.mkdir(parents=True, exist_ok=True)
        out = directory / f"{worker_name}{SUFFIX}"
        write_text_atomic(out, json.dumps(self.describe(), indent=1) + "\n")
        return [ExportedFile(out, CAPTURE_KIND)]

    def describe(self) -> dict[str, Any]:
        count, first, last = self._iterations
        return {
            "backend": "cuda",
            "global_step": self.global_step,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "nvtx_domain": DOMAIN,
            "nvtx_range": self.range_name,
            "nvtx_capture": f"{self.range_name}@{DOMAIN}",
            # the N-th cudaProfilerStart of this process: nsys's N-th capture range in it (None: skipped)
            "capture_range": self._capture,
            "capture_skipped": self._skipped,
            "iterations": {"count": count, "first": first, "last": last},
            **self._times,
            "nsys": nsys_commands(self.range_name),
            **({"metadata": self.extra_metadata} if self.extra_metadata else {}),
        }


class _NvtxRange:
    """A push/pop range in rlprof's domain (the engine thread opens and closes it)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> "_NvtxRange":
        domain = nvtx_domain()
        domain.push_range(domain.get_event_attributes(message=self.name))
        return self

    def __exit__(self, *exc: object) -> None:
        nvtx_domain().pop_range()


def nvtx_domain() -> Any:
    """rlprof's NVTX domain (the ``nvtx`` package's ``Domain``: its calls cost a third of the
    module-level ones, benchmarks/bench_nvtx.py; a no-op ``DummyDomain`` until a tool attaches)."""
    import nvtx

    return nvtx.get_domain(DOMAIN)


def _unavailable() -> str | None:
    import importlib.util

    if importlib.util.find_spec("nvtx") is None:
        return "cuda emits NVTX ranges through the nvtx package, and it is not installed here (pip install nvtx)"
    return None


KIND = BackendKind(
    name="cuda",
    devices=(),  # never picked by "auto": vLLM's "profiler": "cuda", SGLang's CUDA_PROFILER or backend "cuda" ask for it
    unavailable=_unavailable,
    refuses={"npu": "cuda captures CUDA devices; an Ascend worker has none (use npu or auto)"},
    build=lambda context, table, overrides: CudaProfilerBackend(extra_metadata=context.extra_metadata),
)
