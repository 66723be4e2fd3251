"""The RL global step from an engine's weight version (``step_source: weight_version``).

SGLang and vLLM 0.33 keep the version of the weights they serve as a string
(``"default"`` until a trainer sets one). Trainers that set it count their
syncs: slime sends the rollout's ``weight_version`` with every weight update,
miles ends each sync with ``POST /update_weight_version``. Version ``v`` is
global step ``v + trainer_step_offset``. A version that is not an integer
(``"default"``, a hash) or a step below 0 gives no step: the session writes
where it would without one, and the start answer says why.
"""

from __future__ import annotations

import re
from typing import Any

from . import StepChoice

_INTEGER = re.compile(r"^\s*[+-]?\d+\s*$")


def as_integer(version: Any) -> int | None:
    """``4`` and ``"4"`` are 4; anything else (``"default"``, ``"v4"``, ``4.5``, ``True``) is None."""
    if isinstance(version, bool):
        return None
    if isinstance(version, int):
        return version
    if isinstance(version, str) and _INTEGER.match(version):
        return int(version)
    return None


def step_of(version: Any, offset: int) -> StepChoice:
    number = as_integer(version)
    if number is None:
        return StepChoice(None, f"weight_version {version!r}",
                           f"weight_version {version!r} is not an integer: no global step (the default folder); "
                           "set one with the engine's weight update or POST /update_weight_version")
    source = f"weight_version {number} + offset {offset}"
    if number + offset < 0:
        return StepChoice(None, source, f"weight_version {number} + trainer_step_offset {offset} = "
                                         f"{number + offset}, below 0: no global step (the default folder)")
    return StepChoice(number + offset, source)
