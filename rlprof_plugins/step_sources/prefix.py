"""The RL global step named in a trace-name prefix (``step_source: profile_prefix``).

Some callers can send a ``profile_prefix`` and nothing else of rlprof's: vLLM's
Rust frontend forwards only ``profile_prefix``, ``delay_iterations`` and
``max_iterations`` to the engine, and SGLang's gRPC-mode sidecar builds its
profile request from a fixed set of SGLang's own fields. With this source a
prefix ``global_step_<N>`` (alone, or followed by ``.``, ``_`` or ``-`` and more)
records into ``global_step_<N>/``; the files keep the prefix in their names,
as the engine writes them. Opt-in: without it a prefix is only a name, as
natively. A prefix that names no step gives the default folder and a warning.
"""

from __future__ import annotations

import re
from typing import Any

from . import StepChoice

PATTERN = re.compile(r"^global_step_(\d+)(?:[._-]|$)")


def step_of(prefix: Any) -> StepChoice:
    m = PATTERN.match(prefix) if isinstance(prefix, str) else None
    if m is None:
        return StepChoice(None, f"profile_prefix {prefix!r}",
                          f"step_source profile_prefix: profile_prefix {prefix!r} names no step (global_step_<N>): "
                          "no global step (the default folder)")
    return StepChoice(int(m.group(1)), f"profile_prefix {prefix}")
