"""How an engine wires the step metrics: one hook of the same shape on every engine.

An engine's patch module makes one ``StepMetricsHook`` with a ``locate``
function, the one thing that differs between engines: where an engine
process (a vLLM worker, an SGLang scheduler) writes its step metrics, as a
``RecorderPlace`` (root, rank, options, and where the engine keeps its weight
version in that process, if it does), or None when they are off. The hook
then gives the patch module the same calls on both engines:

- ``recorder(owner)`` on every iteration: the owner's ``StepRecorder``, built
  on first use and kept on the owner (None when off); the patch module calls
  its ``begin()`` and ``end(info)`` around the iteration;
- ``command(owner, command)``: a step command (``weight_version``,
  ``mark_step`` with a ``global_step``, or with a trainer's
  ``weights_version``; ``flight_dump``, the flight recorder's ring written
  now) answered, or None for a profiling command. A trainer's ``mark_step``
  may carry ``measure_dir``: the folder the trainer gives this server for its
  files, where an engine launched without a profiler directory (a verl
  replica it does not profile) measures its steps; ``locate`` is then asked
  with ``measure_dir=`` and places the step metrics there when the engine's
  own configuration names no directory;
- ``started(owner, command, reply)``: a start that went through names its
  step, so iterations count for it from then on;
- ``phase(owner, record)``: an RL phase the owner ran (``phases.timed``), kept
  in its open step; ``command`` takes the same as ``{"op": "phase", "record":
  ...}`` where the phase ran in another process (vLLM's engine core, for its
  workers).

Nothing here raises into the engine: a recorder that cannot be built logs one
warning, and step metrics are off for that owner.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

from .._log import logger
from ..config.options import ProfileOptions
from .phases import PhaseRecord
from .recorder import StepRecorder, recorder_for

STEP_OPS = ("weight_version", "mark_step", "flight_dump", "phase")  # for the step metrics, not a profiling session


class RecorderPlace(NamedTuple):
    """Where one engine process's step metrics go: ``root`` (its ``steps/`` folder's parent), ``rank``
    (the rank label its files are named by), its ``options``, and ``read_version`` (how to read the
    engine's weight version in this process each iteration, where the engine keeps it there)."""

    root: str | None
    rank: str
    options: ProfileOptions
    read_version: Callable[[], Any] | None = None


class StepMetricsHook:
    """One engine's wiring of the step metrics (see the module's docstring)."""

    def __init__(self, engine: str, locate: Callable[..., RecorderPlace | None],
                 attr: str = "_rlprof_step_recorder") -> None:
        self.engine = engine
        self._locate = locate
        self.attr = attr  # where the owner keeps its recorder (False: step metrics are off for it)

    def recorder(self, owner: Any, *context: Any, measure_dir: str | None = None) -> StepRecorder | None:
        """The owner's recorder (``context``: what ``locate`` needs beside the owner; ``measure_dir``: the
        trainer's folder for an engine launched without one, tried where the owner has no recorder yet)."""
        found = owner.__dict__.get(self.attr)
        if found is not None and (found or measure_dir is None):
            return found or None
        recorder = None
        try:
            place = (self._locate(owner, *context) if measure_dir is None
                     else self._locate(owner, *context, measure_dir=measure_dir))
            if place is not None:
                recorder = recorder_for(place.root, place.rank, place.options)
                if recorder is not None:
                    recorder.version_reader = place.read_version  # read for a phase's record
                    if recorder.by_version:
                        recorder.read_version = place.read_version
        except Exception as e:  # never into the engine loop: step metrics are off for this owner
            logger.warning("rlprof: step metrics off on this %s process: %s: %s", self.engine, type(e).__name__, e)
            recorder = None
        owner.__dict__[self.attr] = recorder if recorder is not None else False
        return recorder

    def command(self, owner: Any, command: dict, *context: Any) -> dict | None:
        """A step command's answer (the owner may not have run a model yet: a trainer sets the first
        version before any traffic); None for any other command."""
        op = command.get("op")
        if op not in STEP_OPS:
            return None
        measure_dir = command.get("measure_dir") if op == "mark_step" else None
        recorder = self.recorder(owner, *context, measure_dir=measure_dir if isinstance(measure_dir, str) else None)
        if recorder is None:
            return {"ok": True, "step_metrics": False}
        if op == "flight_dump":
            return recorder.flight_dump(command.get("folder"))
        if op == "phase":
            record = PhaseRecord.from_json(command.get("record"))
            if record is not None:
                recorder.phase(record)
            return {"ok": record is not None, "step_metrics": True, "global_step": recorder.metrics.step}
        if op == "weight_version":
            recorder.weight_version(command.get("version"))
        elif command.get("weights_version") is not None:  # a trainer integration's weight sync
            recorder.trainer_synced(int(command["weights_version"]), str(command.get("trainer", "trainer")))
        else:
            recorder.mark(int(command["global_step"]))
        return {"ok": True, "step_metrics": True, "global_step": recorder.metrics.step}

    def started(self, owner: Any, command: dict, reply: Any, *context: Any) -> None:
        """A start that went through names its step: the owner's iterations count for it from now on."""
        if command.get("op") == "start" and isinstance(reply, dict) and reply.get("ok"):
            recorder = self.recorder(owner, *context)
            if recorder is not None:
                recorder.started(command.get("global_step"))

    def phase(self, owner: Any, record: PhaseRecord, *context: Any) -> None:
        """An RL phase the owner ran, into its open step (nothing where step metrics are off)."""
        recorder = self.recorder(owner, *context)
        if recorder is not None:
            recorder.phase(record)
