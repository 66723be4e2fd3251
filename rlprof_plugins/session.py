"""One profiling session per worker, and the controller that runs them.

The controller is the worker-side state machine: it takes start/stop/status
commands (plain dicts, so they cross process boundaries unchanged), and is
told when each engine iteration begins and ends. It decides, with the
session's ``StepWindow``, when the backend starts and stops, annotates every
recorded iteration, and exports when the window closes -- without a stop
request. It never raises into the engine: a failing backend marks the session
``failed`` with the reason and the engine keeps serving.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .backends import Backend
from .errors import RequestError
from .layout import session_dir
from .window import StepWindow

logger = logging.getLogger("rlprof")

WAITING = "waiting"  # started; the window has not begun yet
RECORDING = "recording"
DONE = "done"
FAILED = "failed"
ACTIVE_STATES = (WAITING, RECORDING)

ITERATION_PREFIX = "rlprof::iteration"


def iteration_annotation(index: int) -> str:
    """The name of the range recorded around one engine iteration.

    ``index`` counts iterations from the start request, so a window
    ``[2, 6)`` shows ranges 2, 3, 4 and 5 in the trace.
    """
    return f"{ITERATION_PREFIX} {index}"


@dataclass
class Session:
    global_step: int | None
    directory: Path
    worker_name: str
    window: StepWindow
    state: str = WAITING
    iteration: int = 0  # iterations begun since the start request
    recorded: int = 0
    files: list[str] = field(default_factory=list)
    error: str | None = None
    ended_by: str | None = None  # "stop", "window", "error" or "shutdown"
    stop_acknowledged: bool = False
    started_at: float = field(default_factory=time.time)
    ended_at: float | None = None

    def summary(self) -> dict[str, Any]:
        return {
            "global_step": self.global_step,
            "state": self.state,
            "directory": str(self.directory),
            "worker": self.worker_name,
            "step_start": self.window.start,
            "step_end": self.window.end,
            "iterations_seen": self.iteration,
            "iterations_recorded": self.recorded,
            "files": list(self.files),
            "error": self.error,
            "ended_by": self.ended_by,
        }


class ProfilerController:
    """Runs sessions for one worker.

    ``backend_factory`` makes a fresh backend per session (native vLLM builds
    its profiler once and ignores later names; a fresh one per session is what
    makes step after step land in its own folder). ``worker_name(prefix)``
    returns the trace name for this rank.
    """

    def __init__(
        self,
        *,
        root_dir: str,
        worker_name: Callable[[str | None], str],
        backend_factory: Callable[[], Backend],
    ) -> None:
        self._root = root_dir
        self._worker_name = worker_name
        self._backend_factory = backend_factory
        self._lock = threading.Lock()
        self._session: Session | None = None
        self._backend: Backend | None = None
        self._annotation: Any = None
        # Read on every engine iteration: a plain attribute, no lock.
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
                    return self._stop()
                if op == "status":
                    return self._reply(True)
            return {"ok": False, "error": f"unknown op {op!r}"}
        except RequestError as e:
            return {"ok": False, "invalid": {"field": e.field, "message": e.message}}
        except Exception as e:  # never raise into the engine
            logger.exception("rlprof: %s command failed", op)
            return {"ok": False, "error": f"{type(e).__name__}: {e}"}

    def _reply(self, ok: bool, **extra: Any) -> dict[str, Any]:
        reply = {"ok": ok, "session": self._session.summary() if self._session else None}
        reply.update(extra)
        return reply

    def _start(self, cmd: dict[str, Any]) -> dict[str, Any]:
        current = self._session
        if current is not None and current.state in ACTIVE_STATES:
            return self._reply(False, conflict="a profiling session is already running")
        directory = session_dir(self._root, cmd.get("global_step"))
        window = StepWindow(cmd.get("step_start") or 0, cmd.get("step_end"))
        session = Session(
            global_step=cmd.get("global_step"),
            directory=directory,
            worker_name=self._worker_name(cmd.get("profile_prefix")),
            window=window,
        )
        self._session = session
        self._backend = None
        self.active = True
        if window.start == 0:
            # Like native vLLM: recording starts with the request, so a stop
            # with no traffic in between still yields a (near empty) trace.
            self._begin_recording(session)
        return self._reply(True)

    def _stop(self) -> dict[str, Any]:
        s = self._session
        if s is not None and s.state in ACTIVE_STATES:
            self._finish(s, ended_by="stop")
            return self._reply(s.state == DONE)
        if s is not None and s.ended_by in ("window", "error") and not s.stop_acknowledged:
            s.stop_acknowledged = True
            return self._reply(True, already_finished=True)
        return self._reply(False, conflict="no profiling session is running")

    def shutdown(self) -> None:
        """Finish a running session before the worker goes away.

        A torch profiler still running at interpreter exit crashes torch's
        teardown; like vLLM's own ``WorkerProfiler.shutdown``, write what was
        recorded.
        """
        with self._lock:
            s = self._session
            if s is not None and s.state in ACTIVE_STATES:
                self._finish(s, ended_by="shutdown")

    # ---- engine iterations (hot path) -----------------------------------
    def begin_iteration(self) -> None:
        s = self._session
        if s is None or s.state not in ACTIVE_STATES:
            return
        try:
            if s.state == WAITING and s.window.starts_at(s.iteration):
                self._begin_recording(s)
            if s.state == RECORDING and self._backend is not None:
                self._annotation = self._backend.annotation(iteration_annotation(s.iteration))
                self._annotation.__enter__()
        except Exception as e:
            self._fail(s, e)

    def end_iteration(self) -> None:
        s = self._session
        if s is None or s.state not in ACTIVE_STATES:
            return
        try:
            if self._annotation is not None:
                annotation, self._annotation = self._annotation, None
                annotation.__exit__(None, None, None)
            if s.state == RECORDING:
                s.recorded += 1
                if s.window.over_after(s.iteration):
                    with self._lock:
                        self._finish(s, ended_by="window")
            s.iteration += 1
        except Exception as e:
            self._fail(s, e)

    # ---- transitions ----------------------------------------------------
    def _begin_recording(self, s: Session) -> None:
        try:
            backend = self._backend_factory()
            backend.start()
        except Exception as e:
            self._fail(s, e)
            return
        self._backend = backend
        s.state = RECORDING

    def _finish(self, s: Session, *, ended_by: str) -> None:
        s.ended_by = ended_by
        s.ended_at = time.time()
        self.active = False
        backend, self._backend = self._backend, None
        if self._annotation is not None:
            annotation, self._annotation = self._annotation, None
            annotation.__exit__(None, None, None)
        if backend is None:
            # The window never began (or start failed): nothing to export.
            if s.state != FAILED:
                s.state = DONE
            return
        try:
            backend.stop()
            s.directory.mkdir(parents=True, exist_ok=True)
            s.files = [str(p) for p in backend.export(s.directory, s.worker_name)]
            s.state = DONE
            logger.info("rlprof: wrote %s", ", ".join(s.files))
        except Exception as e:
            self._fail(s, e)

    def _fail(self, s: Session, exc: BaseException) -> None:
        logger.warning("rlprof: profiling session failed: %s: %s", type(exc).__name__, exc)
        s.state = FAILED
        s.error = f"{type(exc).__name__}: {exc}"
        s.ended_by = s.ended_by or "error"
        s.ended_at = s.ended_at or time.time()
        self.active = False
        backend, self._backend = self._backend, None
        self._annotation = None
        if backend is not None:
            try:
                backend.stop()
            except Exception:
                pass
