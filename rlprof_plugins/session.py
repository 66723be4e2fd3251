"""One profiling session per worker, and the controller that runs them.

The controller is the worker-side state machine: it takes start/stop/status
commands (plain dicts, so they cross process boundaries unchanged), and is
told when each engine iteration begins and ends. It decides, with the
session's ``StepWindow``, when the backend starts and stops, annotates every
recorded iteration, and finishes when the window closes -- without a stop
request.

Finishing never blocks the engine for the export: the backend is stopped on
the engine thread (the profiler must stop where it recorded), then written by
a background exporter thread while the engine keeps serving; the session is
``exporting`` meanwhile. A stop *request* may also be answered before the
profiler stops (``defer``): torch's own stop post-processes every recorded
Python event and takes seconds with stacks on, so the engine completes it
right after the answer -- at its next iteration or when it goes idle
(``complete_stop``) -- on the thread that recorded. The controller never
raises into the engine: a failing backend or export marks the session
``failed`` with the reason.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from . import finalize, manifest
from .backends import Backend, RecordingKept
from .errors import RequestError
from .layout import placement, session_dir
from .requests import shift_to
from .stages import IterationInfo, iteration_annotation
from .window import StepWindow

logger = logging.getLogger("rlprof")

WAITING = "waiting"  # started; the window has not begun yet
RECORDING = "recording"
EXPORTING = "exporting"
DONE = "done"
FAILED = "failed"
ACTIVE_STATES = (WAITING, RECORDING)
HISTORY = 16  # finished sessions kept for status queries by global step


@dataclass
class Session:
    session_id: str
    global_step: int | None
    directory: Path
    worker_name: str
    window: StepWindow
    by_stage: bool = False
    operator_table: bool = False
    keep_last_steps: int | None = None
    merge: bool = False
    torch_overrides: dict[str, Any] = field(default_factory=dict)
    state: str = WAITING
    iteration: int = 0  # iterations begun since the start request
    recorded: int = 0
    stages: dict[str, int] = field(default_factory=dict)  # stage -> iterations recorded
    files: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    ended_by: str | None = None  # "stop", "window", "error" or "shutdown"
    stop_acknowledged: bool = False
    started_at: float = field(default_factory=time.time)
    recording_started_at: float | None = None
    ended_at: float | None = None
    stop_seconds: float | None = None  # on the engine thread: the profiler's own stop
    export_seconds: float | None = None  # on the exporter thread

    def summary(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "global_step": self.global_step,
            "state": self.state,
            "directory": str(self.directory),
            "worker": self.worker_name,
            "step_start": self.window.start,
            "step_end": self.window.end,
            "by_stage": self.by_stage,
            "iterations_seen": self.iteration,
            "iterations_recorded": self.recorded,
            "stage_iterations": dict(self.stages),
            "files": [str(self.directory / f["path"]) for f in self.files],
            "error": self.error,
            "ended_by": self.ended_by,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "stop_seconds": self.stop_seconds,
            "export_seconds": self.export_seconds,
        }


class ProfilerController:
    """Runs sessions for one worker.

    ``backend_factory(operator_table, overrides)`` makes a fresh backend per
    session (``overrides``: the request's own recorder settings; native vLLM builds
    its profiler once and ignores later names; a fresh one per session is what
    makes step after step land in its own folder). ``worker_name(prefix)``
    returns the trace name for this rank. ``manifest_header`` (engine,
    versions, expected ranks) goes into each step folder's manifest.

    ``record_from_request``: a window starting at iteration 0 begins
    recording with the start request (vLLM's behaviour, and its engine
    sleeps while idle), or, when False, with the first engine iteration.
    SGLang's scheduler polls for requests in a busy loop while idle; a
    profiler running then records every operation of that loop, ~10 MB of
    host memory a second on the CPU server, without bound until traffic
    comes (11 GB after 15 idle minutes on the CPU test server).

    ``forward_count()``: the forward passes this worker has run since it
    started, for a window given as SGLang's absolute ``start_step``
    (``requests.shift_to``).
    """

    def __init__(
        self,
        *,
        root_dir: str,
        worker_name: Callable[[str | None], str],
        backend_factory: Callable[[bool, dict[str, Any]], Backend],
        manifest_header: dict[str, Any] | None = None,
        rank_name: str | None = None,
        record_from_request: bool = True,
        forward_count: Callable[[], int] | None = None,
    ) -> None:
        self._root = root_dir
        self._forward_count = forward_count or (lambda: 0)
        self._record_from_request = record_from_request
        self._worker_name = worker_name
        self._rank_name = rank_name or worker_name(None)
        self._backend_factory = backend_factory
        self._manifest_header = dict(manifest_header or {})
        self._lock = threading.RLock()
        self._session: Session | None = None
        self._history: collections.deque[Session] = collections.deque(maxlen=HISTORY)
        self._backend: Backend | None = None
        self._annotation: Any = None
        self._exporter: ThreadPoolExecutor | None = None
        # A session whose stop was answered but whose profiler still runs.
        self._stopping: tuple[Session, Backend] | None = None
        # Read on every engine iteration: a plain attribute, no lock. True
        # while the hooks have work: a session is active or a stop is pending.
        self.active = False

    # ---- commands -------------------------------------------------------
    def handle(self, command: dict[str, Any]) -> dict[str, Any]:
        """Execute a command dict; always returns a reply dict."""
        op = command.get("op")
        try:
            with self._lock:
                if op == "start":
                    return self._start(command)
                if op == "stop":
                    return self._stop(defer=bool(command.get("defer")))
                if op == "complete_stop":
                    self.complete_stop()
                    return self._reply(True)
                if op == "status":
                    return self._status(command.get("global_step"))
            return {"ok": False, "error": f"unknown op {op!r}"}
        except RequestError as e:
            return {"ok": False, "invalid": {"field": e.field, "message": e.message}}
        except Exception as e:  # never raise into the engine
            logger.exception("rlprof: %s command failed", op)
            return {"ok": False, "error": f"{type(e).__name__}: {e}"}

    def _reply(self, ok: bool, session: Session | None = None, **extra: Any) -> dict[str, Any]:
        session = session or self._session
        reply = {"ok": ok, "session": session.summary() if session else None}
        reply.update(extra)
        return reply

    def _status(self, global_step: int | None) -> dict[str, Any]:
        if global_step is None:
            return self._reply(True)
        for s in [self._session, *reversed(self._history)]:
            if s is not None and s.global_step == global_step:
                return self._reply(True, s)
        return {"ok": True, "session": None}

    def _start(self, cmd: dict[str, Any]) -> dict[str, Any]:
        current = self._session
        if current is not None and current.state in ACTIVE_STATES:
            return self._reply(False, conflict="a profiling session is already running")
        self.complete_stop()  # one profiler at a time: the previous one stops first
        cmd = shift_to(cmd, self._forward_count())
        # A per-request output_dir was checked against the configured one by the front end.
        directory = session_dir(cmd.get("output_dir") or self._root, cmd.get("global_step"))
        session = Session(
            session_id=cmd.get("session_id") or f"{time.time_ns():x}",
            global_step=cmd.get("global_step"),
            directory=directory,
            worker_name=self._worker_name(cmd.get("profile_prefix")),
            window=StepWindow(cmd.get("step_start") or 0, cmd.get("step_end")),
            by_stage=bool(cmd.get("by_stage")),
            operator_table=bool(cmd.get("operator_table")),
            keep_last_steps=cmd.get("keep_last_steps"),
            merge=bool(cmd.get("merge")),
            torch_overrides=dict(cmd.get("torch_overrides") or {}),
        )
        if current is not None:
            self._history.append(current)
        self._session = session
        self._backend = None
        self.active = True
        if session.window.start == 0 and self._record_from_request:
            # Like native vLLM: recording starts with the request, so a stop
            # with no traffic in between still yields a (near empty) trace.
            self._begin_recording(session)
        self._write_manifest(session)
        return self._reply(True)

    def _stop(self, defer: bool = False) -> dict[str, Any]:
        s = self._session
        if s is not None and s.state in ACTIVE_STATES:
            self._finish(s, ended_by="stop", defer=defer)
            return self._reply(s.state != FAILED, stop_pending=self._stopping is not None)
        if s is not None and s.ended_by in ("window", "error") and not s.stop_acknowledged:
            s.stop_acknowledged = True
            return self._reply(True, already_finished=True)
        return self._reply(False, conflict="no profiling session is running")

    def shutdown(self, timeout: float | None = 120) -> None:
        """Finish a running session and wait for exports before the worker
        goes away: a torch profiler still running at interpreter exit crashes
        torch's teardown, and users expect the recorded data on disk (vLLM's
        own ``WorkerProfiler.shutdown`` writes it too)."""
        with self._lock:
            s = self._session
            if s is not None and s.state in ACTIVE_STATES:
                self._finish(s, ended_by="shutdown")
            self.complete_stop()
            exporter, self._exporter = self._exporter, None
        if exporter is not None:
            exporter.shutdown(wait=True)

    @property
    def stop_pending(self) -> bool:
        """A stop was answered and the profiler still runs (see ``complete_stop``)."""
        return self._stopping is not None

    # ---- engine iterations (hot path) -----------------------------------
    def begin_iteration(self, info: IterationInfo | None = None) -> None:
        if self._stopping is not None:
            self.complete_stop()
        s = self._session
        if s is None or s.state not in ACTIVE_STATES:
            return
        try:
            if s.state == WAITING and s.window.starts_at(s.iteration):
                self._begin_recording(s)
            if s.state == RECORDING and self._backend is not None:
                if info is not None:
                    s.stages[info.stage] = s.stages.get(info.stage, 0) + 1
                self._annotation = self._backend.annotation(iteration_annotation(s.iteration, info))
                self._annotation.__enter__()
        except Exception as e:
            self._fail(s, e)

    def end_iteration(self) -> None:
        s = self._session
        if s is None or s.state not in ACTIVE_STATES:
            return
        try:
            self._close_annotation()
            if s.state == RECORDING:
                s.recorded += 1
                if s.window.over_after(s.iteration):
                    with self._lock:
                        self._finish(s, ended_by="window")
            s.iteration += 1
        except Exception as e:
            self._fail(s, e)

    # ---- transitions ----------------------------------------------------
    def _close_annotation(self) -> None:
        if self._annotation is not None:
            annotation, self._annotation = self._annotation, None
            annotation.__exit__(None, None, None)

    def _begin_recording(self, s: Session) -> None:
        try:
            backend = self._backend_factory(s.operator_table, s.torch_overrides)
            backend.prepare(placement(s.directory, s.global_step).ranks(), s.worker_name)
            backend.start()
        except Exception as e:
            self._fail(s, e)
            return
        self._backend = backend
        s.state = RECORDING
        s.recording_started_at = time.time()

    def _finish(self, s: Session, *, ended_by: str, defer: bool = False) -> None:
        """End recording: stop the profiler on this (the engine) thread now,
        or with ``defer`` leave that to ``complete_stop``; export elsewhere."""
        s.ended_by = ended_by
        s.ended_at = time.time()
        self.active = False
        self._close_annotation()
        backend, self._backend = self._backend, None
        if backend is None:
            # The window never began (or start failed): nothing to export.
            if s.state != FAILED:
                s.state = DONE
            self._write_manifest(s)
            return
        s.state = EXPORTING
        if defer:
            self._stopping = (s, backend)
            self.active = True  # the next iteration completes the stop
            self._write_manifest(s)
            return
        self._stop_and_export(s, backend)

    def complete_stop(self) -> None:
        """Stop a profiler whose stop was answered already. Must run on the
        thread that recorded (the engine's); a no-op when nothing is pending."""
        with self._lock:
            pending, self._stopping = self._stopping, None
            if pending is None:
                return
            s, backend = pending
            current = self._session
            self.active = current is not None and current.state in ACTIVE_STATES
            self._stop_and_export(s, backend)

    def _stop_and_export(self, s: Session, backend: Backend) -> None:
        t0 = time.perf_counter()
        try:
            backend.stop()
        except Exception as e:
            s.stop_seconds = time.perf_counter() - t0
            self._fail(s, e)
            return
        s.stop_seconds = time.perf_counter() - t0
        self._write_manifest(s)
        if self._exporter is None:
            self._exporter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlprof-export")
        self._exporter.submit(self._export, s, backend)

    def _export(self, s: Session, backend: Backend) -> None:
        """Runs on the exporter thread."""
        t0 = time.perf_counter()
        try:
            s.directory.mkdir(parents=True, exist_ok=True)
            written = backend.export(placement(s.directory, s.global_step), s.worker_name, by_stage=s.by_stage)
            files = [f.describe(s.directory, self._rank_name, "worker") for f in written]
        except RecordingKept as e:  # failed after recording: the data stays, listed with the reason
            with self._lock:
                s.files = [f.describe(s.directory, self._rank_name, "worker") for f in e.kept]
                s.export_seconds = time.perf_counter() - t0
                self._fail(s, e)
            return
        except Exception as e:
            with self._lock:
                s.export_seconds = time.perf_counter() - t0
                self._fail(s, e)
            return
        with self._lock:
            s.files = files
            s.export_seconds = time.perf_counter() - t0
            s.state = DONE
            self._write_manifest(s)
        logger.info("rlprof: wrote %s into %s in %.2f s (global step %s)", ", ".join(f["path"] for f in files),
                    s.directory, s.export_seconds, s.global_step)

    def _fail(self, s: Session, exc: BaseException) -> None:
        logger.warning("rlprof: profiling session failed: %s: %s", type(exc).__name__, exc)
        s.state = FAILED
        s.error = f"{type(exc).__name__}: {exc}"
        s.ended_by = s.ended_by or "error"
        s.ended_at = s.ended_at or time.time()
        if s is self._session:
            self.active = self._stopping is not None
            backend, self._backend = self._backend, None
            self._annotation = None
            if backend is not None:
                try:
                    backend.stop()
                except Exception:
                    pass
        self._write_manifest(s)

    # ---- manifest -------------------------------------------------------
    def _write_manifest(self, s: Session) -> None:
        """Keep the step folder's manifest current (global-step sessions only:
        without a global step the folder layout stays vLLM's own)."""
        if s.global_step is None:
            return
        header = dict(self._manifest_header)
        header.update(global_step=s.global_step, window={"step_start": s.window.start, "step_end": s.window.end},
                      by_stage=s.by_stage, merge=s.merge, keep_last_steps=s.keep_last_steps)
        section = {
            "role": "worker",
            "state": s.state,
            "iterations_recorded": s.recorded,
            "stage_iterations": dict(s.stages),
            "files": s.files,
            "error": s.error,
            "ended_by": s.ended_by,
            "started_at": s.started_at,
            "recording_started_at": s.recording_started_at,
            "ended_at": s.ended_at,
            "stop_seconds": s.stop_seconds,
            "export_seconds": s.export_seconds,
        }
        try:
            manifest.update(
                s.directory,
                session_id=s.session_id,
                writer=self._rank_name,
                section=section,
                header=header,
                on_complete=lambda data: finalize.on_step_complete(s.directory, data),
            )
        except Exception as e:  # a manifest problem must not fail the session
            logger.warning("rlprof: could not update %s/manifest.json: %s", s.directory, e)
