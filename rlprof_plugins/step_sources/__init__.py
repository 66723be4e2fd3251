"""Step sources: which RL global step a start request records into.

A request's own ``global_step`` always wins. Where the caller names none,
a step source may give one: ``trainer`` (the step a trainer integration hands
over within one call: verl's server actors, ``patches/verl``), with
``step_source: weight_version`` the engine's own weight version
(``weight_version``), or with ``step_source: profile_prefix`` a
``global_step_<N>`` trace-name prefix (``prefix``: frontends that forward
nothing else). ``which_step`` picks among them. Imports only the small helpers.

May import: the base modules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StepChoice:
    """A step source's answer: the step (None: the default folder), where it came from (for the
    status and the manifest), and, where a source was asked and gave none, why."""

    global_step: Any
    source: str | None
    warning: str | None = None
