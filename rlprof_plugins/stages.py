"""Classifying engine iterations into stages, and naming them in traces.

An iteration is ``prefill`` when it schedules any prompt (context) tokens and
``decode`` when every scheduled request is generating. A mixed iteration
(a chunk of a prompt next to decodes, as chunked prefill produces) counts as
``prefill``: its kernels run over both at once and cannot be split, and the
prompt part dominates its cost, so putting it with decode would make decode
look slower than it is. Both counts are kept in the annotation, so mixed
iterations can still be found.
"""

from __future__ import annotations

import re
from typing import NamedTuple

PREFILL = "prefill"
DECODE = "decode"
STAGES = (PREFILL, DECODE)

ITERATION_PREFIX = "rlprof::iteration"
ITERATION_RE = re.compile(
    r"^rlprof::iteration (?P<index>\d+)"
    r"(?: \[(?P<stage>prefill|decode)\] prefill_tokens=(?P<prefill>\d+) decode_tokens=(?P<decode>\d+) batch=(?P<batch>\d+))?$"
)


class IterationInfo(NamedTuple):
    """What the engine scheduled in one iteration (a named tuple: made on the engine thread every
    iteration the step metrics count, where a frozen dataclass cost about four times as much)."""

    prefill_tokens: int
    decode_tokens: int
    batch_size: int

    @property
    def stage(self) -> str:
        return PREFILL if self.prefill_tokens > 0 else DECODE


def iteration_annotation(index: int, info: IterationInfo | None = None) -> str:
    """The name of the range recorded around one engine iteration.

    ``index`` counts iterations from the start request, so a window ``[2, 6)``
    shows ranges 2, 3, 4 and 5. The rest is for people reading the trace in
    Perfetto and for ``trace.rewrite.stage_split``.
    """
    if info is None:
        return f"{ITERATION_PREFIX} {index}"
    return (
        f"{ITERATION_PREFIX} {index} [{info.stage}] prefill_tokens={info.prefill_tokens} "
        f"decode_tokens={info.decode_tokens} batch={info.batch_size}"
    )


PROFILER_STEP = "ProfilerStep#"  # torch.profiler's own name for a step


def profiler_step(index: int) -> str:
    """torch.profiler's name for a step (``ProfilerStep#N``), recorded inside
    each ``rlprof::iteration N`` range with the same N: HolisticTraceAnalysis
    and other tools find iterations only by this name (``ProfilerStep\\s*#\\s*(\\d+)``)."""
    return f"{PROFILER_STEP}{index}"
