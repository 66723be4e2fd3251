"""Which global step a start request records into, and where that came from.

In order: the request's own ``global_step`` (always wins); the step a trainer
integration hands over within the call (``trainer``: verl's server actors);
with ``step_source: weight_version``, the engine's own weight version plus
``trainer_step_offset`` (``weight_version``: trainers that version the
weights they sync, such as slime and miles); with ``step_source:
profile_prefix``, a ``global_step_<N>`` prefix (``prefix``: frontends that
forward nothing else); else none (the default folder).
The answer names its source (``"weight_version 4 + offset 1"``), which the
status and the step's manifest keep, and a version that gives no step is a
warning in the start answer rather than a silent default.
"""

from __future__ import annotations

from typing import Any, Callable

from . import StepChoice
from . import prefix as prefix_step
from . import trainer
from .weight_version import step_of

WEIGHT_VERSION = "weight_version"
PROFILE_PREFIX = "profile_prefix"


def choose(given: Any, *, offset: int, source: str,
           weight_version: Callable[[], Any] | None, prefix: Any = None) -> StepChoice:
    """``given``: the request's value as given (parse_start checks it); ``weight_version``: reads the
    engine's version now (None: this engine keeps none); ``prefix``: the request's ``profile_prefix``."""
    if given is not None:
        return StepChoice(given, "request")
    step = trainer.global_step(offset)
    if step is not None:
        return StepChoice(step, trainer.source_text(offset))
    if source == PROFILE_PREFIX:
        return prefix_step.step_of(prefix)
    if source != WEIGHT_VERSION:
        return StepChoice(None, None)
    if weight_version is None:
        return StepChoice(None, None, "step_source weight_version: this engine keeps no weight version; "
                                      "no global step (the default folder)")
    return step_of(weight_version(), offset)
