"""Which global step a start request records into, and where that came from.

In order: the request's own ``global_step`` (always wins); the step a trainer
integration hands over within the call (``trainer``: verl's server actors);
with ``step_source: weight_version``, the engine's own weight version plus
``trainer_step_offset`` (``weight_version``: trainers that version the
weights they sync, such as slime and miles); else none (the default folder).
The answer names its source (``"weight_version 4 + offset 1"``), which the
status and the step's manifest keep, and a version that gives no step is a
warning in the start answer rather than a silent default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from . import trainer
from .weight_version import step_of

WEIGHT_VERSION = "weight_version"


@dataclass(frozen=True)
class Chosen:
    global_step: Any  # the request's value as given (parse_start checks it), or an int, or None
    source: str | None  # None: no step
    warning: str | None = None


def choose(given: Any, *, offset: int, source: str,
           weight_version: Callable[[], Any] | None) -> Chosen:
    """``weight_version``: reads the engine's version now (None: this engine keeps none)."""
    if given is not None:
        return Chosen(given, "request")
    step = trainer.global_step(offset)
    if step is not None:
        return Chosen(step, trainer.source_text(offset))
    if source != WEIGHT_VERSION:
        return Chosen(None, None)
    if weight_version is None:
        return Chosen(None, None, "step_source weight_version: this engine keeps no weight version; "
                                  "no global step (the default folder)")
    found = step_of(weight_version(), offset)
    return Chosen(found.global_step, found.source, found.warning)
