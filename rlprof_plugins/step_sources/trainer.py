"""The RL step a trainer integration hands to rlprof's start, within one call.

Trainers that drive the engine in-process do not pass the step they are at:
verl's ``start_profile()`` takes no arguments (its ``global_step`` argument
was removed again because stock vLLM raised ``TypeError`` on it). What the
trainer's server actor does know is the weights version it holds, set at
every weight sync. A trainer integration (``patches/verl``) wraps the actor's
start and sets ``CURRENT`` around the original call; the start request that
call makes (``requests.parse_start``, either engine) takes its global step
from there when the caller named none:

- the caller's own ``global_step`` (verl's kwarg), as given;
- else the weights version + ``trainer_step_offset`` (an rlprof option,
  default 1: verl syncs after step N, so step N's rollout holds N-1; 0 for
  trainers that sync before the rollout);
- else (no sync yet, reward servers) no step: the default folder, as today.

A context variable, not a global: it reaches exactly the awaits made inside
the wrapped call (the same asyncio task) and no concurrent request.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Iterator

from .._log import logger


@dataclass(frozen=True)
class TrainerStep:
    """What a trainer integration knows at a start: who, and the step or weights version."""

    trainer: str
    global_step: int | None = None  # given by the trainer's caller
    weights_version: int | None = None  # the weights the server holds

    def step(self, offset: int) -> int | None:
        if self.global_step is not None:
            return self.global_step
        if self.weights_version is None:
            return None
        return self.weights_version + offset

    def source(self, offset: int) -> str:
        """Where the step came from, in words (the log and ``rlprof doctor``)."""
        if self.global_step is not None:
            return f"{self.trainer}'s caller passed global_step={self.global_step}"
        if self.weights_version is None:
            return f"{self.trainer} has synced no weights yet: no global step (the default folder)"
        return (f"{self.trainer}'s weights version {self.weights_version} + trainer_step_offset {offset} "
                f"= global step {self.weights_version + offset}")


CURRENT: ContextVar[TrainerStep | None] = ContextVar("rlprof_trainer_step", default=None)


@contextmanager
def given(step: TrainerStep) -> Iterator[None]:
    """``step`` is the trainer's for the calls made inside this block."""
    token = CURRENT.set(step)
    try:
        yield
    finally:
        CURRENT.reset(token)


def active() -> bool:
    """Whether a trainer integration gave a step for the call being made."""
    current = CURRENT.get()
    return current is not None and (current.global_step is not None or current.weights_version is not None)


def source_text(offset: int) -> str | None:
    """Where the trainer's step came from, short (the status and manifest's ``step_source``)."""
    current = CURRENT.get()
    if current is None or current.step(offset) is None:
        return None
    if current.global_step is not None:
        return f"{current.trainer} global_step"
    return f"{current.trainer} weights version {current.weights_version} + offset {offset}"


def global_step(offset: int) -> int | None:
    """The step for a start request that names none: the trainer's, or None."""
    current = CURRENT.get()
    if current is None:
        return None
    step = current.step(offset)
    logger.info("rlprof: %s", current.source(offset))
    return step
