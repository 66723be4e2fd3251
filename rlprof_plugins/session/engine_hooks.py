"""What the engine thread tells a worker's controller: iterations begin and end, the engine waits.

The hot path of ``ProfilerController`` (``controller``), apart from its
commands: read on every engine iteration, so each call does nothing but
attribute reads while no session records. The transitions it triggers
(start recording, end a chunk, finish the window) are the controller's.
"""

from __future__ import annotations

from typing import Any

from ..trace.stages import IterationInfo
from .states import RECORDING, WAITING, Session


class EngineHooks:
    """``begin_iteration``/``end_iteration`` around each engine iteration and
    ``idle`` when the engine is about to wait, on the engine thread; the
    controller supplies the state and the transitions."""

    _session: Session | None
    _recording: Any
    _stopping: Any
    _annotations: tuple
    _lock: Any

    # ---- engine iterations (hot path) -----------------------------------
    def begin_iteration(self, info: IterationInfo | None = None) -> None:
        if self._stopping is not None:
            self.complete_stop()
        s = self._session
        if s is None or not s.active:
            return
        try:
            if s.state == WAITING and s.window.starts_at(s.iteration):
                self._begin_recording(s)
            if s.state == RECORDING and self._recording is not None:
                if self._recording.parked:
                    self._recording.resume(self._new_backend(s))
                if info is not None:
                    s.count_stage(info.stage)
                self._annotations = self._recording.enter_iteration(s.iteration, info)
        except Exception as e:
            self._fail(s, e)

    def end_iteration(self) -> None:
        s = self._session
        if s is None or not s.active:
            return
        try:
            self._close_annotation()
            if self._recording is not None:
                self._recording.leave_iteration()
            if s.state == RECORDING:
                s.recorded += 1
                if s.window.over_after(s.iteration):
                    with self._lock:
                        self._finish(s, ended_by="window")
                elif self._recording is not None and self._recording.chunk_due():
                    self._next_chunk(s, self._recording)
            s.iteration += 1
        except Exception as e:
            self._fail(s, e)

    def idle(self) -> None:
        """The engine is about to wait for work (its engine thread; vLLM's
        worker after an empty step, SGLang's idle scheduler loop): a stop
        answered earlier completes, and the running chunk ends here rather
        than record the wait (``Recording.park``). Cheap when there is nothing to do."""
        if self._stopping is not None:
            self.complete_stop()
        s = self._session
        if s is not None and s.active and s.state == RECORDING:
            with self._lock:
                self._park(s)

    def _close_annotation(self) -> None:
        if self._annotations:
            annotations, self._annotations = self._annotations, ()
            for annotation in reversed(annotations):
                annotation.__exit__(None, None, None)


    # ---- the controller's transitions -------------------------------------
    def complete_stop(self) -> None:
        raise NotImplementedError

    def _begin_recording(self, s: Session) -> None:
        raise NotImplementedError

    def _new_backend(self, s: Session) -> Any:
        raise NotImplementedError

    def _next_chunk(self, s: Session, recording: Any) -> None:
        raise NotImplementedError

    def _park(self, s: Session) -> None:
        raise NotImplementedError

    def _finish(self, s: Session, *, ended_by: str, defer: bool = False) -> None:
        raise NotImplementedError

    def _fail(self, s: Session, exc: BaseException) -> None:
        raise NotImplementedError
