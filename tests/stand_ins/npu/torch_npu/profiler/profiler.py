"""Mirrors ``torch_npu/profiler/profiler.py``: ``profile``, ``tensorboard_trace_handler``, ``analyse``.

What the real one does, and what this stand-in does instead:

- ``start()``: the real profiler creates ``<worker>_<pid>_<time>_ascend_pt``
  under the handler's directory and starts collecting host and device data.
  The stand-in creates the same directory and starts a real
  ``torch.profiler`` (CPU) session.
- ``stop()``: the real profiler flushes raw data (FRAMEWORK/, PROF_*/) and
  calls ``on_trace_ready``. The stand-in writes the host trace as
  ``FRAMEWORK/standin_host_trace.json``, ``profiler_info.json`` (the
  configuration) and ``standin_calls.json``, then calls ``on_trace_ready``.
- ``analyse(path)``: the real analysis writes ``ASCEND_PROFILER_OUTPUT/``.
  The stand-in writes ``trace_view.json`` there in torch_npu's format (a
  JSON array; framework ops as ``cpu_op`` events with microsecond ``ts``
  strings, as ``TraceEventManager.create_x_event`` writes them) for
  ``text``, ``ascend_pytorch_profiler.db`` (sqlite) for ``db``, and with
  data simplification removes the raw FRAMEWORK/ data, as the real one does.
"""

import json
import os
import shutil
import socket
import sqlite3
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Optional

import torch

from torch_npu._C._profiler import ProfilerActivity

from ._recorder import CALLS, record
from .experimental_config import _ExperimentalConfig, ExportType

__all__ = ["supported_activities", "analyse", "tensorboard_trace_handler", "profile"]

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
_RAW = os.path.join("FRAMEWORK", "standin_host_trace.json")


def supported_activities():
    return {ProfilerActivity.CPU, ProfilerActivity.NPU}


class _PathCreator:
    """The real ``ProfPathCreator`` singleton: the handler sets the directory,
    ``start()`` creates the ``*_ascend_pt`` folder inside it."""

    dir_name: Optional[str] = None
    worker_name: Optional[str] = None

    @classmethod
    def create(cls) -> str:
        base = cls.dir_name or os.getcwd()
        worker = "{}_{}".format(cls.worker_name or socket.gethostname(), os.getpid())
        stamp = datetime.now(tz=timezone.utc).astimezone().strftime("%Y%m%d%H%M%S%f")[:-3]
        path = os.path.join(base, f"{worker}_{stamp}_ascend_pt")
        os.makedirs(path)
        return path


def tensorboard_trace_handler(
    dir_name: Optional[str] = None,
    worker_name: Optional[str] = None,
    analyse_flag: bool = True,
    async_mode: bool = False,
):
    record("tensorboard_trace_handler", dir_name=dir_name, worker_name=worker_name, analyse_flag=analyse_flag,
           async_mode=async_mode)
    _PathCreator.dir_name, _PathCreator.worker_name = dir_name, worker_name

    def handler_fn(prof_inst) -> None:
        if analyse_flag:
            analyse(prof_inst.prof_path)

    return handler_fn


class _KinetoProfile:
    def __init__(
        self,
        *,
        activities: Optional[Iterable[ProfilerActivity]] = None,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
        with_flops: bool = False,
        with_modules: bool = False,
        experimental_config: Optional[_ExperimentalConfig] = None,
        custom_trace_id_callback: Optional[Callable[[], str]] = None,
    ):
        self.metadata = {}

    def add_metadata(self, key: str, value: str):
        self.metadata[key] = value

    def add_metadata_json(self, key: str, value: str):
        self.metadata[key] = json.loads(value)


class profile(_KinetoProfile):
    def __init__(
        self,
        *,
        activities: Optional[Iterable[ProfilerActivity]] = None,
        schedule: Optional[Callable[[int], Any]] = None,
        on_trace_ready: Optional[Callable[..., Any]] = None,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
        with_flops: bool = False,
        with_modules: bool = False,
        experimental_config: Optional[_ExperimentalConfig] = None,
        execution_trace_observer: Any = None,
        custom_trace_id_callback: Optional[Callable[[], str]] = None,
        use_cuda: Optional[bool] = None,
    ):
        super().__init__(activities=activities, record_shapes=record_shapes, profile_memory=profile_memory,
                         with_stack=with_stack, with_flops=with_flops, with_modules=with_modules,
                         experimental_config=experimental_config)
        self.kwargs = dict(
            activities=[a.name for a in (activities or supported_activities())], schedule=schedule is not None,
            on_trace_ready=on_trace_ready is not None, record_shapes=record_shapes, profile_memory=profile_memory,
            with_stack=with_stack, with_flops=with_flops, with_modules=with_modules,
            experimental_config=experimental_config.kwargs if experimental_config else None,
        )
        record("profile", **self.kwargs)
        self.on_trace_ready = on_trace_ready
        self.prof_path: Optional[str] = None
        self._calls_from = len(CALLS) - 1
        self._host = None
        self.stopped = False

    def start(self):
        record("profile.start")
        self.prof_path = _PathCreator.create()
        self.stopped = False
        self._host = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                            record_shapes=self.kwargs["record_shapes"],
                                            with_stack=self.kwargs["with_stack"])
        self._host.start()

    def stop(self):
        record("profile.stop")
        self._host.stop()
        raw = os.path.join(self.prof_path, _RAW)
        os.makedirs(os.path.dirname(raw))
        self._host.export_chrome_trace(raw)
        config = self.kwargs["experimental_config"] or {"export_type": ["text"], "data_simplification": True}
        with open(os.path.join(self.prof_path, "profiler_info.json"), "w") as f:
            json.dump({"config": {"common_config": self.kwargs, "experimental_config": config},
                       "metadata": self.metadata}, f)
        first = self._calls_from  # include the config and handler built for this profile
        while first > 0 and CALLS[first - 1][0] in ("_ExperimentalConfig", "tensorboard_trace_handler"):
            first -= 1
        with open(os.path.join(self.prof_path, "standin_calls.json"), "w") as f:
            json.dump(CALLS[first:], f, default=str)
        self.stopped = True
        if self.on_trace_ready:
            self.on_trace_ready(self)

    def step(self):
        record("profile.step")

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, exe_type, exe_val, exc_tb):
        self.stop()


def _trace_view(raw_path: str) -> list:
    """torch_npu's trace_view.json form of the recorded host events."""
    with open(raw_path) as f:
        kineto = json.load(f)
    base_ns = int(kineto.get("baseTimeNanoseconds", 0))
    host = [e for e in kineto.get("traceEvents", []) if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")]
    pid = host[0]["pid"] if host else os.getpid()
    out: list = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "Python"}},
        {"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": "CPU"}},
        {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": 0}},
    ]
    for e in host:
        ts_ns = base_ns + int(round(float(e["ts"]) * 1000))
        out.append({"ph": "X", "name": e["name"], "pid": pid, "tid": e.get("tid", 0),
                    "ts": f"{ts_ns // 1000}.{ts_ns % 1000:03d}", "dur": float(e.get("dur", 0)), "cat": "cpu_op",
                    "args": {k: v for k, v in (e.get("args") or {}).items() if k in ("Sequence number",)}})
    return out


def analyse(profiler_path: str, max_process_number: int = os.cpu_count() // 2 or 1,
            export_type: Optional[Any] = None):
    record("analyse", profiler_path=profiler_path, max_process_number=max_process_number, export_type=export_type)
    out = os.path.join(profiler_path, OUTPUT_DIR)
    if os.environ.get("RLPROF_STANDIN_NO_CANN"):
        # what the real analysis does on a host without the CANN toolkit: it
        # starts writing its output, then fails parsing the device data
        os.makedirs(out, exist_ok=True)
        open(os.path.join(out, "trace_view.json"), "w").close()
        raise RuntimeError("msprof not found: the CANN toolkit (ASCEND_TOOLKIT_HOME) is not installed")
    with open(os.path.join(profiler_path, "profiler_info.json")) as f:
        config = json.load(f)["config"]["experimental_config"]
    types = export_type or config.get("export_type") or [ExportType.Text]
    types = [types] if isinstance(types, str) else list(types)
    out = os.path.join(profiler_path, OUTPUT_DIR)
    os.makedirs(out, exist_ok=True)
    events = _trace_view(os.path.join(profiler_path, _RAW))
    if ExportType.Text in types:
        with open(os.path.join(out, "trace_view.json"), "w") as f:
            json.dump(events, f)
    if ExportType.Db in types:
        db = sqlite3.connect(os.path.join(out, "ascend_pytorch_profiler.db"))
        db.execute("CREATE TABLE PYTORCH_API (name TEXT, startNs TEXT, dur REAL)")
        db.executemany("INSERT INTO PYTORCH_API VALUES (?, ?, ?)",
                       [(e["name"], e["ts"], e["dur"]) for e in events if e["ph"] == "X"])
        db.commit()
        db.close()
    if config.get("data_simplification", True):
        shutil.rmtree(os.path.join(profiler_path, "FRAMEWORK"), ignore_errors=True)
