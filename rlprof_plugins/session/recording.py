"""How one session records: a backend's life, and its reports to the manifest.

Shared by the workers' controller and the API-server recorder, which differ
only in when they record (iterations vs. start and stop requests) and on which
thread each step runs. A ``Recording`` is made per session: ``start`` (the
folder its raw trace goes to is prepared first), ``annotation`` ranges,
chunks ended (``rotate``, ``park``) and resumed, ``stop`` (on the thread that
recorded: Kineto binds a session to it, and the backend saves its raw trace
there too), each pause it caused kept for the trace. What it leaves on disk
is its ``output`` (``recording_output``, written on the exporter thread).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, ContextManager

from ..backends import Backend
from ..backends.memory_history import MemoryHistory, MemorySettings, TraceOff
from ..backends.which_backend import for_request
from ..store.layout import Placement
from .chunk_plan import ChunkPlan, RunningChunk, StopCosts, recording_kind
from .chunks import Chunks, chunkable
from .recording_output import RecordingOutput
from .._log import logger
from ..trace.format.pauses import IDLE, MEMORY, RESUME, ROTATION, STOP, Pause
from ..stages import IterationInfo, iteration_annotation, profiler_step


class Recording:
    """One backend recording one session's traces for one writer.

    ``directory``: the session folder the manifest describes files against;
    ``out``: where the raw trace goes while recording; ``place``: where the
    export writes; ``name``: the trace's worker name; ``rank`` and ``role``:
    how the manifest lists the files; ``memory``: the allocator history
    recorded over the same window, its snapshot written beside the traces.
    """

    def __init__(self, backend: Backend, *, directory: Path, out: Path, place: Placement, name: str, rank: str,
                 role: str, plan: ChunkPlan | None = None, memory: MemoryHistory | None = None) -> None:
        self.backend = backend
        self.directory = directory
        self._out = out
        self.place = place
        self.name = name
        self.rank = rank
        self.role = role
        self.chunks: Chunks | None = None  # set when the first chunk ends (rotate or park)
        self.pauses: list[Pause] = []  # each stop the engine thread waited for, in order
        self.pause_listener: Any = None  # told each pause as it is kept (the rank's flight recorder)
        self._chunk = RunningChunk()  # what the running chunk holds
        self.parked = False  # the last chunk ended while the engine waited; none runs until ``resume``
        self._plan = plan  # when a chunk ends (None: never)
        self.memory = memory
        self.output = RecordingOutput(self)  # what it leaves on disk, written by the exporter thread

    @classmethod
    def of_rank(cls, backend: Backend, directory: Path, *, step: bool, name: str, rank: str,
                plan: ChunkPlan | None = None, memory: MemoryHistory | None = None) -> "Recording":
        """A worker's recording: raw and whole traces in ``ranks/`` of a step
        folder, stage traces in ``<stage>/``; everything in ``directory`` itself
        without a global step (the engine's own layout)."""
        place = Placement(directory, step)
        return cls(backend, directory=directory, out=place.ranks(), place=place, name=name, rank=rank, role="worker",
                   plan=plan, memory=memory)

    @classmethod
    def of_session(cls, request: Any, directory: Path, *, name: str, rank: str,
                   backends: Callable[..., Backend], costs: StopCosts,
                   allocator: Callable[[], Any], streaming: bool = False) -> "Recording":
        """A worker session's recording as its ``StartRequest`` asks: a fresh backend
        (``which_backend.for_request``; none for a memory-only session), chunks planned by this
        rank's measured stop ``costs`` (``streaming``: the engine had work when the session began and has not
        waited since, ``ChunkPlan``), and the memory history of the ``allocator()``'s device where asked."""
        r = request
        backend = for_request(backends, r) if r.trace else TraceOff()
        plan = ChunkPlan(r.chunk_iterations, r.max_pause_ms, costs, recording_kind(backend), r.max_recording_mb,
                         streaming=streaming)
        memory = MemoryHistory(allocator(), MemorySettings(r.memory_stacks, r.memory_max_entries)) \
            if r.memory else None
        return cls.of_rank(backend, directory, step=r.global_step is not None, name=name, rank=rank, plan=plan,
                           memory=memory)

    @classmethod
    def of_frontend(cls, backend: Backend, directory: Path, *, step: bool, name: str) -> "Recording":
        """The API server's recording: ``frontend/`` of a step folder, apart from the ranks."""
        out = Placement(directory, step).frontend()
        return cls(backend, directory=directory, out=out, place=Placement(out, False), name=name, rank="frontend",
                   role="frontend")

    def start(self) -> None:
        """Start recording: the allocator's history (once per session), then the backend."""
        if self.memory is not None and not self.memory.recording:
            self.memory.start()
        try:
            self._start_backend()
        except BaseException:
            self._memory_off()
            raise

    def _start_backend(self) -> None:
        self.backend.prepare(self._out, self.name, self.directory)
        self.backend.start()
        self._chunk.restart()

    def annotation(self, label: str) -> ContextManager[object]:
        return self.backend.annotation(label)

    def enter_iteration(self, index: int, info: IterationInfo | None) -> tuple[ContextManager[object], ...]:
        """Open iteration ``index``'s ranges, returned for closing in reverse: ours
        (``rlprof::iteration N``) and inside it torch's own name for a step
        (``ProfilerStep#N``, what HolisticTraceAnalysis finds iterations by).
        The running chunk holds the iteration (its pause's ``args`` say so)."""
        self._chunk.enter(index)
        self._tell_iteration(index)
        ranges = (self.annotation(iteration_annotation(index, info)), self.annotation(profiler_step(index)))
        for entered, annotation in enumerate(ranges):
            try:
                annotation.__enter__()
            except BaseException:
                for opened in reversed(ranges[:entered]):
                    opened.__exit__(None, None, None)
                raise
        return ranges

    def leave_iteration(self) -> None:
        """The iteration's ranges closed: its time counts as busy, not idle."""
        self._chunk.leave()
        self._tell_iteration(None)

    def _tell_iteration(self, index: int | None) -> None:
        """A backend that keeps events of its own per iteration hears where each begins and ends
        (the torch backend's sampled Python stacks: ``backends.stack_sampler``)."""
        tell = getattr(self.backend, "set_iteration", None)
        if tell is not None:
            tell(index)

    def rotate(self, backend: Backend, cause: str = ROTATION) -> float:
        """End the current chunk at an iteration boundary (engine thread): stop
        the running profiler, start ``backend`` in its place; the stopped one
        is written with the rest at the export. ``cause``: ``ROTATION`` (the
        plan's length) or ``BUDGET`` (the chunk grew the process by
        ``max_recording_mb``). Returns the stop's seconds; the whole pause
        (stop and start) is kept for the trace with its cause."""
        return self._stop_chunk(cause, backend)

    def _stop_chunk(self, cause: str, following: Backend | None = None) -> float:
        """Stop the running chunk's profiler and keep it with the chunks stopped before it, then start
        ``following`` where given; the whole pause is kept under ``cause``. Returns the stop's seconds."""
        if self.chunks is None:
            self.chunks = Chunks(self.directory, self.name)
        began, ended = time.time_ns(), self._end_chunk()
        try:
            seconds = self._stop_backend()
            self.chunks.stopped.append(self.backend)  # kept before anything else can fail
            if following is not None:
                self.backend = following
                self._start_backend()
        finally:
            self._paused(cause, began, ended)
        return seconds

    @property
    def can_park(self) -> bool:
        """Whether a chunk runs that ``park`` may end (a chunked recording, a backend that chunks)."""
        return not self.parked and self._plan is not None and self._plan.chunked and chunkable(self.backend)

    def park(self) -> float:
        """End the running chunk (engine thread) because the engine is about to wait for work, and start none
        until its next iteration (``resume``): a profiler running through the wait would record the engine's
        wait loop (with Python stacks, millions of events a second), and the stop costs the engine nothing
        while it has no work. Returns the stop's seconds."""
        seconds = self._stop_chunk(IDLE)
        self.parked = True
        return seconds

    def resume(self, backend: Backend) -> None:
        """The first iteration after ``park``: ``backend`` records from here (its start is a pause too)."""
        began = time.time_ns()
        self.backend = backend
        self._start_backend()
        self.parked = False
        self._keep(Pause.timed(RESUME, began, None, None))

    @property
    def chunking(self) -> str | None:
        """How its chunks end (``ChunkPlan.rule``; None: no plan, the API server's recording)."""
        return None if self._plan is None else self._plan.rule

    @property
    def held(self) -> int:
        """Iterations the running chunk holds."""
        return 0 if self.parked else self._chunk.held

    def chunk_due(self) -> bool:
        """Whether the running chunk ends at this iteration boundary (its plan; a backend that chunks; a
        chunk that holds no iteration yet never does)."""
        return (self._plan is not None and not self.parked and self._chunk.held > 0 and chunkable(self.backend)
                and self._plan.due(self._chunk.held, self._chunk.idle_seconds()))

    def budget_due(self) -> bool:
        """Whether the running chunk has grown the process by ``max_recording_mb`` and ends now
        (``ChunkPlan.over_budget``)."""
        return (self._plan is not None and not self.parked and self._chunk.held > 0 and chunkable(self.backend)
                and self._plan.over_budget(self._chunk))

    def stop(self) -> float | None:
        """Take the window's memory snapshot (its own pause), then stop the
        profiler (torch post-processes here): the session's last pause.
        Returns the seconds the profiler's stop took (None: parked, no profiler ran)."""
        if self.memory is not None and self.memory.recording:
            began = time.time_ns()
            try:
                self.memory.snapshot()
            except Exception as e:  # the trace still stops and is written; the session says what failed
                self.memory.report["error"] = f"taking the memory snapshot failed: {type(e).__name__}: {e}"
            self._keep(Pause.timed(MEMORY, began, *(self._chunk.span or (None, None))))
        if self.parked:
            return None
        began, ended = time.time_ns(), self._end_chunk()
        try:
            return self._stop_backend()
        finally:
            self._paused(STOP, began, ended)

    def _stop_backend(self) -> float:
        """Stop the backend on this thread (torch's stop and the raw trace's save); returns the seconds."""
        t0 = time.perf_counter()
        self.backend.stop()
        return time.perf_counter() - t0

    def _end_chunk(self) -> tuple[RunningChunk, float]:
        """The running chunk as its stop begins, with its idle seconds up to then."""
        chunk, self._chunk = self._chunk, RunningChunk()
        return chunk, chunk.idle_seconds()

    def _paused(self, cause: str, began: int, ended: tuple[RunningChunk, float]) -> None:
        """Keep the pause for the trace, with what its plan priced it at where the plan sizes chunks by their
        pause (``planned_ms``); the plan learns what it cost for what the chunk held."""
        chunk, idle = ended
        planned = self._plan.predicted(chunk.held, idle) * 1e3 if self._plan is not None and self._plan.paced else None
        pause = Pause.timed(cause, began, *(chunk.span or (None, None)), planned_ms=planned, idle_ms=idle * 1e3)
        self._keep(pause)
        if self._plan is not None:
            self._plan.learn(pause.seconds, chunk.held, rotated=cause == ROTATION, idle_seconds=idle)

    def _keep(self, pause: Pause) -> None:
        self.pauses.append(pause)
        if self.pause_listener is not None:
            try:
                self.pause_listener(pause)
            except Exception:  # the flight recorder's ring; the recording goes on regardless
                self.pause_listener = None

    def abandon(self) -> None:
        """Stop after a failure; the memory history recorded so far is taken, not
        dropped, and the running chunk, once stopped, joins the chunks before it
        (``salvage`` writes them all, with the command that joins them; each is freed
        as it is written). A chunk whose stop itself failed is freed (``discard``),
        never kept in the engine's process."""
        self._memory_off(snapshot=True)
        if self.parked:
            return
        try:
            self.backend.stop()
        except Exception:
            self._discard(self.backend)
            return
        if chunkable(self.backend):
            if self.chunks is None:
                self.chunks = Chunks(self.directory, self.name)
            self.chunks.stopped.append(self.backend)
        else:
            self._discard(self.backend)

    @staticmethod
    def _discard(backend: Backend) -> None:
        discard = getattr(backend, "discard", None)
        if discard is not None:
            try:
                discard()
            except Exception as e:
                logger.warning("rlprof: freeing a failed session's recording failed: %s: %s", type(e).__name__, e)

    def _memory_off(self, snapshot: bool = False) -> None:
        try:
            if self.memory is not None and self.memory.recording:
                self.memory.snapshot() if snapshot else self.memory.stop()
        except Exception as e:
            logger.warning("rlprof: stopping the memory history failed: %s: %s", type(e).__name__, e)
