"""A rank's step metrics as the engine patches drive them: time each iteration, follow the RL step.

The engines' patch modules reach it through ``engine_hook.StepMetricsHook``,
calling ``begin``/``end`` around every engine iteration (traced or not) and
telling where the RL step moves: a start request naming its
``global_step``, the engine's weight version (``step_source:
weight_version``: version + ``trainer_step_offset``, as for traced steps),
a trainer integration's weight sync (verl's ``set_global_steps``: the same
sum), or an explicit mark; and the RL phases the engine runs between
generations (``phase``: a ``phases.PhaseRecord``). Every call is guarded: a failure is logged once and
step metrics stop for this rank; serving never sees it.
"""

from __future__ import annotations

import atexit
from pathlib import Path
from typing import Any, Callable

from .._log import logger
from ..config.options import ProfileOptions
from ..step_sources.weight_version import step_of
from ..step_sources.which_step import WEIGHT_VERSION
from ..store.layout import STEPS_DIR
from ..stages import IterationInfo
from .flight import FlightRecorder
from .flight_dump import DumpWriter
from .log import StepLog
from .phases import PhaseRecord
from .record import StepRecord
from .timer import StepMetrics

NO_VERSION = object()  # no weight version seen yet (None is a version a caller may send)


class StepRecorder:
    """One rank's ``StepMetrics`` and the ``StepLog`` it writes to."""

    def __init__(self, root: str | Path, rank: str, options: ProfileOptions) -> None:
        self.log = StepLog(Path(root) / STEPS_DIR, rank)
        self.metrics = StepMetrics(rank, self._finished, on_step=self._step_moved)
        self.flight: FlightRecorder | None = None  # the rank's flight recorder (``flight_recorder``)
        if options.flight_recorder is not None:
            try:
                writer = DumpWriter(root, rank, dict(options.flight_recorder), options.server_name,
                                    on_written=lambda a: self.log.put_anomaly(a.reason, a.stage),
                                    on_dropped=self.log.put_dropped_dump)
                self.flight = FlightRecorder(dict(options.flight_recorder), writer)
            except Exception as e:  # the step metrics go on without it
                logger.warning("rlprof: flight recorder off on %s: %s: %s", rank, type(e).__name__, e)
        self.offset = options.trainer_step_offset
        self.by_version = options.step_source == WEIGHT_VERSION
        self._version: Any = NO_VERSION  # the last weight version seen
        self.version_reader: Callable[[], Any] | None = None  # where a phase reads it, if this process keeps it
        self.read_version: Callable[[], Any] | None = None  # where the engine reads it each iteration, if it does
        self.failed: str | None = None
        atexit.register(self.close)  # the open step is written when the engine process ends

    # ---- the engine thread, every iteration ------------------------------
    def begin(self, waiting: int = -1, profiled: bool = False) -> None:
        """An iteration begins (``waiting``: the requests the engine holds back, where it says; ``profiled``:
        a profiling session records it, which the flight recorder sets apart); where the
        engine keeps its weight version in this process (``read_version``), the step follows it first."""
        if self.failed is None:
            try:
                if self.read_version is not None:
                    self.follow_version()
                self.metrics.begin()
            except Exception as e:
                self._fail(e)
        flight = self.flight
        if flight is not None:
            try:
                flight.profiling = profiled
                flight.begin(waiting)
            except Exception as e:
                self._flight_failed(e)

    def end(self, info: IterationInfo | None) -> None:
        if self.failed is None:
            try:
                self.metrics.end(info)
            except Exception as e:
                self._fail(e)
        flight = self.flight
        if flight is not None:
            try:
                flight.end(info)
            except Exception as e:
                self._flight_failed(e)

    def idle(self) -> None:
        """The engine is about to wait for work (the flight recorder's gap is then no stall)."""
        flight = self.flight
        if flight is not None:
            flight.idle()

    def flight_dump(self, folder: str | None) -> dict:
        """A dump asked for: the ring as it is now (written by the recorder's thread, ``after_seconds`` on)."""
        if self.flight is None:
            return {"ok": True, "flight_recorder": False}
        anomaly = self.flight.request(folder)
        return {"ok": True, "flight_recorder": True, "global_step": anomaly.global_step, "rank": self.metrics.rank}

    def _finished(self, record: StepRecord) -> None:
        """A finished step: to the log, and to the flight recorder (slow against the steps before?); a step
        of RL phases alone ran no iteration, so it is neither judged nor a baseline."""
        self.log.put(record)
        flight = self.flight
        if flight is not None and record.iterations:
            try:
                means = {stage: t.total_ms / t.iterations for stage, t in record.stages.items() if t.iterations}
                flight.step_finished(record.global_step, record.busy_ms, means)
            except Exception as e:
                self._flight_failed(e)

    def _step_moved(self, step: Any) -> None:
        self.log.put_step(step)
        flight = self.flight
        if flight is not None:
            try:
                flight.step_changed(step if isinstance(step, int) else None)
            except Exception as e:
                self._flight_failed(e)

    def _flight_failed(self, e: BaseException) -> None:
        """The flight recorder failed: it stops (one warning), the step metrics and serving go on."""
        flight, self.flight = self.flight, None
        logger.warning("rlprof: flight recorder stopped on %s: %s: %s (step metrics and serving go on)",
                       self.metrics.rank, type(e).__name__, e)
        if flight is not None:
            try:
                flight.close(timeout=0, write=False)
            except Exception:
                pass

    # ---- where the RL step moves ----------------------------------------
    def weight_version(self, version: Any) -> None:
        """The engine's weight version now (cheap when unchanged); a step only with ``weight_version``."""
        if version == self._version:
            return
        self._version = version
        if not self.by_version or self.failed is not None:
            return
        choice = step_of(version, self.offset)
        if choice.global_step is not None:
            self._set(choice.global_step, "weight_version")

    def follow_version(self) -> None:
        """Read the engine's weight version where this process keeps it (``read_version``); a version
        that cannot be read stops the reading with one warning, and steps follow starts only."""
        read = self.read_version
        if read is None:
            return
        try:
            version = read()
        except Exception as e:
            self.read_version = None
            logger.warning("rlprof: the engine's weight version cannot be read (%s): steps follow starts only", e)
            return
        self.weight_version(version)

    def phase(self, record: PhaseRecord) -> None:
        """An RL phase that ran on this rank (``phases.timed``), stamped with the weight version seen last, into
        the open step; on the thread that runs the engine's iterations. The gap it held since the last
        iteration was the trainer's work, never a stall of the flight recorder's."""
        self.idle()
        if self.failed is not None:
            return
        try:
            if record.weight_version is None:
                version = None if self._version is NO_VERSION else self._version
                if self.version_reader is not None:
                    try:
                        version = self.version_reader()
                    except Exception:  # the version seen last stands
                        pass
                if version is not None:
                    record.weight_version = str(version)
            self.metrics.phase(record)
        except Exception as e:
            self._fail(e)

    def started(self, global_step: Any) -> None:
        """A start request named its step (any step source): iterations count for it from now on."""
        if isinstance(global_step, int) and not isinstance(global_step, bool) and global_step >= 0:
            self._set(global_step, "request")

    def mark(self, global_step: int) -> None:
        self._set(global_step, "mark_step")

    def trainer_synced(self, weights_version: int, trainer: str) -> None:
        """A trainer integration saw a weight sync (verl's ``set_global_steps``): iterations count for
        the step a start would record into now (the version + ``trainer_step_offset``)."""
        if weights_version + self.offset >= 0:
            self._set(weights_version + self.offset, f"{trainer} weights version")

    def close(self) -> None:
        try:
            self.metrics.flush()
            if self.flight is not None:
                self.flight.close()
        finally:
            self.log.close()

    def _set(self, step: int, source: str) -> None:
        if self.failed is None:
            try:
                self.metrics.set_step(step, source)
            except Exception as e:
                self._fail(e)

    def _fail(self, e: BaseException) -> None:
        self.failed = f"{type(e).__name__}: {e}"
        logger.warning("rlprof: step metrics stopped on %s: %s (serving goes on)", self.metrics.rank, self.failed)


def recorder_for(root: str | None, rank: str, options: ProfileOptions) -> StepRecorder | None:
    """A rank's recorder, or None: ``step_metrics`` off, or no directory configured."""
    if not options.step_metrics or not root:
        return None
    return StepRecorder(root, rank, options)
