"""Which ranges of a trace are engine iterations: rlprof's own, the engines', torch's.

Users come with traces they already have, so a trace without rlprof's
``rlprof::iteration N [stage] ...`` ranges is read through the annotations the
engines write themselves while their profiler runs (read from the release
wheels, shared engine notes section 11):

- vLLM's workers (``Worker.annotate_profile``, vLLM 0.11 and newer):
  ``execute_context_N(T)_generation_M(U)``: N context (prompt) requests of T
  tokens beside M generating ones of U tokens; with detailed annotations
  ``execute_S_context_N(sqT sk.. )_generation_M(sqU sk..)``;
- SGLang's model runner (``profile_utils.build_step_span_name``):
  ``step[EXTEND bs=B toks=T]``, ``step[DECODE bs=B]``, ``step[MIXED ...]``,
  ``step[VERIFY ...]`` (speculative decoding's target step); draft-model and
  idle steps (``DRAFT``, ``DRAFT_LOOP``, ``IDLE``) run inside or beside an
  iteration and are not counted as one;
- torch.profiler's ``ProfilerStep#N`` (any engine driving ``profiler.step()``;
  rlprof writes one inside each of its iterations too): no stage.

One trace is read through one source, the first of ``SOURCES`` it holds, so
an iteration is never counted twice (rlprof's traces also hold
``ProfilerStep#N``, vLLM's may also hold ``execute_...``). A stage follows the
rule of ``rlprof_plugins.stages``: any prompt token makes it ``prefill``.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ...stages import DECODE, ITERATION_PREFIX, ITERATION_RE, PREFILL, PROFILER_STEP

SOURCES = ("rlprof", "vllm", "sglang", "torch")  # the order a trace's iterations are read by
SOURCE_TITLES = {"rlprof": "rlprof::iteration ranges", "vllm": "vLLM's execute_context_* annotations",
                 "sglang": "SGLang's step[...] annotations", "torch": "torch.profiler's ProfilerStep#N",
                 "step_metrics": "step metrics (steps/<rank>.jsonl, for the steps not traced)"}

_VLLM = re.compile(r"^execute_(?:\d+_)?context_(?P<ctx>\d+)\((?:sq)?(?P<ctx_tokens>\d+)[^)]*\)"
                   r"_generation_(?P<gen>\d+)\((?:sq)?(?P<gen_tokens>\d+)[^)]*\)$")
_SGLANG = re.compile(r"^step\[(?P<mode>[A-Z_0-9]+) bs=(?P<bs>\d+)(?: toks=(?P<toks>\d+))?[^\]]*\]$")
_SGLANG_PREFILL = frozenset({"EXTEND", "MIXED", "SPLIT_PREFILL", "DLLM_EXTEND", "PREBUILT"})
_SGLANG_DECODE = frozenset({"DECODE", "VERIFY", "TARGET_VERIFY"})
_PROFILER_STEP = re.compile(r"^ProfilerStep\s*#\s*(\d+)$")


class Named(NamedTuple):
    """What an iteration's name says; ``index`` None where the engine does not number them."""

    source: str
    index: int | None
    stage: str | None
    prefill_tokens: int | None
    decode_tokens: int | None
    batch: int | None


def iteration_of(name: str) -> Named | None:
    """The iteration a range's name announces, or None for any other range."""
    if name.startswith(ITERATION_PREFIX):
        m = ITERATION_RE.match(name)
        if not m:
            return None
        return Named("rlprof", int(m["index"]), m["stage"], *(
            int(m[k]) if m[k] is not None else None for k in ("prefill", "decode", "batch")))
    if name.startswith("execute_"):
        m = _VLLM.match(name)
        if not m:
            return None
        ctx, gen = int(m["ctx"]), int(m["gen"])
        return Named("vllm", None, PREFILL if ctx > 0 else DECODE, int(m["ctx_tokens"]), int(m["gen_tokens"]),
                     ctx + gen)
    if name.startswith("step["):
        m = _SGLANG.match(name)
        if not m or m["mode"] not in _SGLANG_PREFILL | _SGLANG_DECODE:
            return None
        bs = int(m["bs"])
        if m["mode"] in _SGLANG_PREFILL:
            return Named("sglang", None, PREFILL, int(m["toks"]) if m["toks"] else None, None, bs)
        return Named("sglang", None, DECODE, 0, bs, bs)
    if name.startswith(PROFILER_STEP):
        m = _PROFILER_STEP.match(name)
        return Named("torch", int(m[1]), None, None, None, None) if m else None
    return None
