"""Runs one worker's sessions: when to record, driven by commands and iterations.

Commands arrive as plain dicts (they cross process boundaries unchanged; a
start is read back into its ``StartRequest`` once, here); the engine says when
each iteration begins and ends and when it is about to wait (the hot path, read on every engine
iteration: each call does nothing but attribute reads while no session records). With the session's ``StepWindow`` the
controller decides when recording starts and stops, annotates every recorded
iteration and finishes when the window closes, without a stop request. How
to record is the ``Recording``'s; what a session is and says, ``states``.

The profiler stops on the engine thread (where it recorded) and saves its raw trace there;
a background exporter writes the files from that. A stop *request* may be answered before
the profiler stops (``defer``; torch's stop takes seconds with stacks on): the engine completes
it at its next iteration or when idle (``complete_stop``). A chunked recording's chunk ends
when the engine is about to wait and the next starts with the next iteration (``_park``):
no profiler records an idle engine, and the stop runs while no work waits for it. Each
stopped chunk is written as soon as it stopped. Nothing raises into the engine: a failure
marks the session ``failed`` with the reason.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any, Callable

from .._log import logger
from ..backends import Backend
from ..backends.memory_history import host_allocator
from ..backends.which_backend import for_request
from ..errors import RequestError
from ..stages import IterationInfo
from ..store import servers
from ..store.manifest import DONE, EXPORTING, FAILED, RECORDING, WAITING
from ..trace.format.pauses import BUDGET, ROTATION
from .chunk_plan import StopCosts
from .exporter import Exporter, report
from .recording import Recording
from .states import HISTORY, Session


class ProfilerController:
    """Runs sessions for one worker.

    ``backend_factory(operator_table, overrides)``: a fresh backend per session (native vLLM
    builds one once). ``worker_name(prefix)``: this rank's trace name; ``manifest_header``: the
    engine's part of each step manifest. ``record_from_request``: a window from iteration 0
    records from the start request (vLLM's behaviour) or, False, from the first iteration: SGLang's
    idle scheduler busy-polls, and a profiler running then grows without bound.
    ``forward_count()``: forward passes so far, for SGLang's absolute ``start_step``. ``node``: the
    node this rank runs on, for a server spanning nodes (``manifest`` explains what it changes).
    ``allocator()``: the device allocator's module a ``memory`` session records the history of."""

    def __init__(self, *, root_dir: str, worker_name: Callable[[str | None], str],
                 backend_factory: Callable[[bool, dict[str, Any]], Backend],
                 manifest_header: dict[str, Any] | None = None, rank_name: str | None = None,
                 record_from_request: bool = True, forward_count: Callable[[], int] | None = None,
                 node: int = 0, allocator: Callable[[], Any] = host_allocator) -> None:
        self._root, self._node = root_dir, node
        self._forward_count = forward_count or (lambda: 0)
        self._record_from_request = record_from_request
        self._worker_name = worker_name
        self._rank_name = rank_name or worker_name(None)
        self._backend_factory = backend_factory
        self._allocator = allocator
        self._manifest_header = dict(manifest_header or {})
        self._lock = threading.RLock()
        self._session: Session | None = None
        self._history: collections.deque[Session] = collections.deque(maxlen=HISTORY)
        self._recording: Recording | None = None
        self._annotations: tuple = ()  # the open ranges of the running iteration
        self._exporter = Exporter()
        self._costs = StopCosts()  # what this rank's stops cost, for chunks sized by it ("auto")
        # A session whose stop was answered but whose profiler still runs.
        self._stopping: tuple[Session, Recording] | None = None
        # Read on every engine iteration: a plain attribute, no lock. True
        # while the hooks have work: a session is active or a stop is pending.
        self.active = False
        self.pause_listener: Callable[[Any], None] | None = None  # each recording's pauses, as they happen

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
            recording = self._recording
            if s.state == RECORDING and recording is not None:
                if recording.parked:
                    recording.resume(self._new_backend(s))
                elif recording.chunk_due():
                    # a chunk ends as the next iteration begins, not as the last one ends: an engine about
                    # to wait parks it first (``idle``), where no work waits for the stop
                    self._next_chunk(s, recording)
                elif recording.budget_due():
                    self._next_chunk(s, recording, BUDGET)
                if info is not None:
                    s.count_stage(info.stage)
                self._annotations = recording.enter_iteration(s.iteration, info)
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
            s.iteration += 1
        except Exception as e:
            self._fail(s, e)

    def idle(self) -> None:
        """The engine is about to wait for work (its engine thread; vLLM's
        worker after an empty step, SGLang's idle scheduler loop): a stop
        answered earlier completes, and the running chunk ends here rather
        than record the wait (``Recording.park``); a session still waiting for its window learns that the
        engine waits between its bursts (``Session.engine_waited``). Cheap when there is nothing to do."""
        if self._stopping is not None:
            self.complete_stop()
        s = self._session
        if s is not None and s.active:
            if s.state == RECORDING:
                with self._lock:
                    self._park(s)
            elif s.state == WAITING:
                s.engine_waited = True

    def _close_annotation(self) -> None:
        if self._annotations:
            annotations, self._annotations = self._annotations, ()
            for annotation in reversed(annotations):
                annotation.__exit__(None, None, None)

    # ---- commands -------------------------------------------------------
    def handle(self, command: dict[str, Any]) -> dict[str, Any]:
        """Execute a command dict; always returns a reply dict."""
        op = command.get("op")
        try:
            with self._lock:
                if op == "status":
                    s = self._find(command.get("global_step"))
                    return self._reply(True, s) if s is not None else {"ok": True, "session": None}
                if op == "stop":
                    return self._stop(defer=bool(command.get("defer")))
                if op == "complete_stop":
                    self.complete_stop()
                    return self._reply(True)
                if op == "start":
                    return self._start(command)
                if op in ("roster", "read"):  # about one session's files (Session.answer)
                    s = self._find(command.get("global_step"))
                    reply = {"ok": True, **(s.answer(command, self._rank_name) if s is not None else {})}
                    if reply.get("roster"):
                        self._write_manifest(s)
                    return reply
            return {"ok": False, "error": f"unknown op {op!r}"}
        except RequestError as e:
            return {"ok": False, "invalid": {"field": e.field, "message": e.message}}
        except Exception as e:  # never raise into the engine
            logger.exception("rlprof: %s command failed", op)
            return {"ok": False, "error": f"{type(e).__name__}: {e}"}

    def _reply(self, ok: bool, session: Session | None = None, **extra: Any) -> dict[str, Any]:
        session = session or self._session
        if session is None:
            return {"ok": ok, "session": None, **extra}
        summary = session.summary(self._rank_name)
        # a chunked recording stops its profiler while the engine waits for work and starts one with the next
        # iteration: ``parked`` says that no profiler runs now (a client can wait for an idle engine's park)
        recording = self._recording if session is self._session else None
        summary["parked"] = recording is not None and recording.parked
        return {"ok": ok, "session": summary, **extra}

    def _find(self, global_step: int | None) -> Session | None:
        """The current session, or the newest one of ``global_step``."""
        if global_step is None:
            return self._session
        return next((s for s in [self._session, *reversed(self._history)]
                     if s is not None and s.global_step == global_step), None)

    def _start(self, command: dict[str, Any]) -> dict[str, Any]:
        current = self._session
        if current is not None and current.active:
            return self._reply(False, conflict="a profiling session is already running")
        self.complete_stop()  # one profiler at a time: the previous one stops first
        # the root as it stands now: a server that lost its claim on it writes below servers/<name>/ instead
        session = Session.from_command(command, root=str(servers.current(self._root)),
                                       forwards_done=self._forward_count(),
                                       worker_name=self._worker_name, node=self._node)
        if current is not None:
            self._history.append(current)
        self._session = session
        self._recording = None
        self.active = True
        session.engine_waited = bool(command.get("engine_idle"))
        if session.window.start == 0 and self._record_from_request:
            # Like native vLLM: recording starts with the request, so a stop
            # with no traffic in between still yields a (near empty) trace.
            # Chunked, on an engine that says it is idle, that first chunk ends
            # at once: the engine waits for work, and its wait loop is no part of the window.
            self._begin_recording(session)
            if command.get("engine_idle"):
                self._park(session)
        else:
            self._warm_up(session)
        self._write_manifest(session)
        return self._reply(True)

    def _stop(self, defer: bool = False) -> dict[str, Any]:
        s = self._session
        if s is not None and s.active:
            self._finish(s, ended_by="stop", defer=defer)
            return self._reply(s.state != FAILED, stop_pending=self._stopping is not None)
        if s is not None and s.ended_by in ("window", "error") and not s.stop_acknowledged:
            s.stop_acknowledged = True
            return self._reply(True, already_finished=True)
        return self._reply(False, conflict="no profiling session is running")

    def shutdown(self, timeout: float | None = 120) -> None:
        """Finish a running session and wait for exports before the worker goes away: a profiler
        left running crashes torch's teardown; the data goes to disk, as vLLM's own shutdown does."""
        with self._lock:
            s = self._session
            if s is not None and s.active:
                self._finish(s, ended_by="shutdown")
            self.complete_stop()
        self._exporter.shutdown()

    @property
    def costs_the_engine(self) -> bool:
        """Whether a session records now, or its files are still being written: either way the engine's
        iterations carry the profiler's cost (the flight recorder sets them apart). A plain read."""
        return self.active or self._exporter.pending > 0

    @property
    def stop_pending(self) -> bool:
        """A stop was answered and the profiler still runs (see ``complete_stop``)."""
        return self._stopping is not None

    # ---- transitions ----------------------------------------------------
    def _begin_recording(self, s: Session) -> None:
        try:
            recording = Recording.of_session(s.request, s.directory, name=s.worker_name, rank=self._rank_name,
                                             backends=self._backend_factory, costs=self._costs,
                                             allocator=self._allocator, streaming=not s.engine_waited)
            recording.start()
        except Exception as e:
            self._fail(s, e)
            return
        recording.pause_listener = self.pause_listener
        s.chunking = recording.chunking
        self._recording = recording
        s.state = RECORDING
        s.recording_started_at = time.time()

    def _warm_up(self, s: Session) -> None:
        """A session whose recording begins later, inside the engine's work: what its backend's first start in
        this process would load is loaded now, with the start request (``warm_up``, where a backend has one)."""
        try:
            warm_up = getattr(self._new_backend(s), "warm_up", None) if s.request.trace else None
            if warm_up is not None:
                warm_up()
        except Exception as e:  # the recording's own start will say what fails
            logger.debug("rlprof: warming the backend up failed: %s: %s", type(e).__name__, e)

    def _new_backend(self, s: Session) -> Backend:
        return for_request(self._backend_factory, s.request)

    def _next_chunk(self, s: Session, recording: Recording, cause: str = ROTATION) -> None:
        """A fresh profiler from this iteration boundary on (see ``chunks``): the plan's length (``ROTATION``)
        or the chunk's memory budget (``BUDGET``)."""
        s.count_stop(recording.rotate(self._new_backend(s), cause))
        self._exporter.submit(recording.output.write_chunks)  # its events leave the process as soon as written

    def _park(self, s: Session) -> None:
        """End the running chunk while the engine waits (``idle``); never raises."""
        recording = self._recording
        if recording is None or not recording.can_park:
            return
        try:
            s.count_stop(recording.park())
        except Exception as e:
            self._fail(s, e)
            return
        self._exporter.submit(recording.output.write_chunks)

    def _finish(self, s: Session, *, ended_by: str, defer: bool = False) -> None:
        """End recording: stop the profiler on this (the engine) thread now,
        or with ``defer`` leave that to ``complete_stop``; export elsewhere."""
        s.ended_by = ended_by
        s.ended_at = time.time()
        self.active = False
        self._close_annotation()
        recording, self._recording = self._recording, None
        if recording is None:
            # The window never began (or start failed): nothing to export.
            if s.state != FAILED:
                s.state = DONE
            self._write_manifest(s)
            return
        s.state = EXPORTING
        if defer:
            self._stopping = (s, recording)
            self.active = True  # the next iteration completes the stop
            self._write_manifest(s)
            return
        self._stop_and_export(s, recording)

    def complete_stop(self) -> None:
        """Stop a profiler whose stop was answered already. Must run on the
        thread that recorded (the engine's); a no-op when nothing is pending."""
        with self._lock:
            pending, self._stopping = self._stopping, None
            if pending is None:
                return
            s, recording = pending
            current = self._session
            self.active = current is not None and current.active
            self._stop_and_export(s, recording)

    def _stop_and_export(self, s: Session, recording: Recording) -> None:
        t0 = time.perf_counter()
        try:
            seconds = recording.stop()
            if seconds is not None:  # None: parked, no profiler was running
                s.count_stop(seconds)
        except Exception as e:
            s.count_stop(time.perf_counter() - t0)
            self._fail(s, e)
            return
        self._write_manifest(s)
        self._exporter.submit(self._export, s, recording)

    def _export(self, s: Session, recording: Recording) -> None:
        """Runs on the exporter thread."""
        exported = recording.output.export(by_stage=s.request.by_stage)
        with self._lock:
            s.files, s.export_seconds, s.memory = exported.files, exported.seconds, exported.memory
            if exported.error is not None:
                self._fail(s, exported.error)
                return
            s.state = DONE
            self._write_manifest(s)
        logger.info("rlprof: wrote %s into %s in %.2f s (global step %s)", ", ".join(f["path"] for f in s.files),
                    s.directory, s.export_seconds, s.global_step)

    def _fail(self, s: Session, exc: BaseException) -> None:
        logger.warning("rlprof: profiling session failed: %s: %s", type(exc).__name__, exc)
        s.fail(exc)
        with self._lock:
            recording = None
            if s is self._session:
                self.active = self._stopping is not None
                recording, self._recording = self._recording, None
                self._annotations = ()
                if recording is not None:
                    recording.abandon()
            # the failure is in the manifest before the exporter may list what it keeps: the exporter's write
            # comes after this one, never under it (which would leave the kept files unlisted)
            self._write_manifest(s)
            if recording is not None and recording.output.keeps_data:
                # what earlier chunks and the memory history recorded stays on disk
                self._exporter.submit(self._keep_chunks, s, recording)

    def _keep_chunks(self, s: Session, recording: Recording) -> None:
        """Exporter thread, after a failure: the chunks stopped before it, kept with the command that joins
        them, and the memory snapshot."""
        kept = recording.output.salvage()
        with self._lock:
            s.files, s.memory, s.error = kept.files, kept.memory, "; ".join(str(e) for e in (s.error, kept.error) if e)
            self._write_manifest(s)

    def _write_manifest(self, s: Session) -> None:
        """Keep the step folder's manifest current (global-step sessions only)."""
        if s.global_step is None:
            return
        report(s.directory, session_id=s.request.session_id, writer=self._rank_name, section=s.manifest_section(),
               header={**self._manifest_header, **s.manifest_header()})
