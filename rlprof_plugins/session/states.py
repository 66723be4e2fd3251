"""What one profiling session is and says about itself: when to record, not how.

Torch-free: a ``Session`` holds the request it was started with, the window,
the iterations seen and recorded, its state and, once written, its files. The
controller moves it between states; the status answer (``summary``) and the
worker's section of the step's manifest (``manifest_section``) are read from
it here, in one place.

States: ``waiting`` (started; the window has not begun), ``recording``,
``exporting`` (the profiler stopped or is stopping; files being written),
``done`` and ``failed`` (with the reason; recorded data is kept).
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..store.layout import STEPS_DIR, read_piece, session_dir
from ..store.manifest import DONE, FAILED, MANIFEST, RECORDING, WAITING
from ..metrics.log import SUFFIX as STEP_LOG
from ..config.requests import StartRequest
from .window import StepWindow

ACTIVE_STATES = (WAITING, RECORDING)
HISTORY = 16  # finished sessions kept for status queries by global step
HOST = socket.gethostname()
READ_MAX = 8 << 20  # the most bytes one ``read`` command answers (a piece of a file, ``rlprof collect``)


@dataclass
class Session:
    request: StartRequest
    directory: Path
    worker_name: str
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
    stop_seconds: float | None = None  # on the engine thread: the profiler's own stops, in all
    longest_stop_seconds: float | None = None  # the longest of them (one per chunk when chunked)
    stops: int = 0
    # whether the engine waited for work since the start request, before the recording began (its idle hook ran,
    # or the engine said it was idle): where it did not, ``auto`` sizes chunks by their pause (``chunk_plan``)
    engine_waited: bool = False
    chunking: str | None = None  # how the recording's chunks end, once it began (``ChunkPlan.rule``)
    export_seconds: float | None = None  # on the exporter thread
    memory: dict[str, Any] | None = None  # the memory snapshot: entries, snapshot and dump seconds, bytes
    node: int = 0  # the node this rank runs on (a server spanning nodes)
    roster: list[dict[str, Any]] | None = None  # every rank's node, host and folder, once all started
    window: StepWindow = field(init=False)

    def __post_init__(self) -> None:
        self.window = StepWindow(self.request.step_start, self.request.step_end)

    @classmethod
    def from_command(cls, command: dict[str, Any], *, root: str, forwards_done: int,
                     worker_name: Callable[[str | None], str], node: int = 0) -> "Session":
        """A new session from a start command as it reached this worker (its
        request was checked where it arrived, including a per-request
        ``output_dir`` against the configured ``root``)."""
        request = StartRequest.from_command(command, forwards_done)
        return cls(request=request, directory=session_dir(request.output_dir or root, request.global_step),
                   worker_name=worker_name(request.profile_prefix), node=node)

    @property
    def global_step(self) -> int | None:
        return self.request.global_step

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    def count_stage(self, stage: str) -> None:
        self.stages[stage] = self.stages.get(stage, 0) + 1

    def count_stop(self, seconds: float) -> None:
        """One of torch's stops on the engine thread (one per chunk), its save included."""
        self.stops += 1
        self.stop_seconds = (self.stop_seconds or 0.0) + seconds
        self.longest_stop_seconds = max(self.longest_stop_seconds or 0.0, seconds)

    def fail(self, exc: BaseException) -> None:
        self.state = FAILED
        self.error = f"{type(exc).__name__}: {exc}"
        self.ended_by = self.ended_by or "error"
        self.ended_at = self.ended_at or time.time()

    def _outcome(self) -> dict[str, Any]:
        """What the session did, as both its status answer and its manifest section say it."""
        return {
            "state": self.state,
            "iterations_recorded": self.recorded,
            "stage_iterations": dict(self.stages),
            "error": self.error,
            "ended_by": self.ended_by,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "stop_seconds": self.stop_seconds,
            "longest_stop_seconds": self.longest_stop_seconds,
            "stops": self.stops,
            "chunking": self.chunking,
            "export_seconds": self.export_seconds,
            "memory": self.memory,
        }

    def summary(self, rank: str) -> dict[str, Any]:
        """This session in a status answer; ``rank``: the rank's name (``naming.rank_label``)."""
        r = self.request
        return {
            "rank": rank,
            "host": HOST,
            "node": self.node,
            "session_id": r.session_id,
            "global_step": r.global_step,
            "step_source": r.step_source,
            "directory": str(self.directory),
            "worker": self.worker_name,
            "step_start": r.step_start,
            "step_end": r.step_end,
            "by_stage": r.by_stage,
            "chunk_iterations": r.chunk_iterations, "max_pause_ms": r.max_pause_ms,
            "iterations_seen": self.iteration,
            "files": [str(self.directory / f["path"]) for f in self.files],
            **self._outcome(),
        }

    def manifest_header(self) -> dict[str, Any]:
        """What this session adds to the step manifest's header (the engine's part comes from the patch)."""
        r = self.request
        header = {"global_step": r.global_step, "step_source": r.step_source,
                  "window": {"step_start": r.step_start, "step_end": r.step_end},
                  "by_stage": r.by_stage, "merge": r.merge, "keep_last_steps": r.keep_last_steps}
        if self.roster is not None:
            header["roster"] = self.roster
        return header

    def answer(self, command: dict[str, Any], rank: str) -> dict[str, Any]:
        """The commands about this session's files. ``roster``: where every rank
        writes (a server spanning nodes; the front end sends it once all started);
        ``read``: a piece of one of this rank's written files, or of its step metrics
        (``steps/<rank>.jsonl``), for ``rlprof collect`` through the head node (the
        only way to another node's disk a trainer has)."""
        if command.get("op") == "roster":
            if command.get("session_id") != self.request.session_id:
                return {}
            self.roster = [dict(r) for r in command.get("roster") or []]
            return {"roster": True}
        if command.get("rank") != rank:
            return {}  # another rank's file
        path = str(command.get("path") or "")
        offset, length = int(command.get("offset") or 0), min(int(command.get("length") or READ_MAX), READ_MAX)
        if path == f"{STEPS_DIR}/{rank}{STEP_LOG}":  # its step metrics, beside the step folders of its root
            steps = self.directory.parent / STEPS_DIR / f"{rank}{STEP_LOG}"
            if not steps.is_file():
                return {"missing": f"{rank} has no step metrics ({steps})"}
            return read_piece(steps, offset, length)
        listed = path in [f["path"] for f in self.files] and self.state in (DONE, FAILED)
        if not listed and path != MANIFEST:  # its own files once written, and its folder's manifest
            return {"missing": f"{rank} has no written file {path!r} in global step {self.global_step}"}
        return read_piece(self.directory / path, offset, length)

    def manifest_section(self) -> dict[str, Any]:
        """This worker's section of the step manifest."""
        return {"role": "worker", "node": self.node, "files": self.files,
                "recording_started_at": self.recording_started_at, **self._outcome()}
