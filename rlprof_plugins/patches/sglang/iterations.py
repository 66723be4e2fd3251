"""Helper: what one SGLang scheduler batch ran: its stage, or no model forward at all.

The scheduler patch counts one iteration per ``Scheduler.run_batch`` of a
batch that runs the model, classified by the rule shared with vLLM
(``rlprof_plugins.stages``).
"""

from __future__ import annotations

from typing import Any

from rlprof_plugins.stages import IterationInfo


def iteration_info(batch: Any) -> IterationInfo | None:
    """The stage of one batch, or None when it runs no model forward.

    Speculative verify batches check drafted tokens of requests that are
    generating: decode. Mixed (chunked prefill next to decodes) batches
    count as prefill, by the rule shared with vLLM (``rlprof_plugins.stages``).
    """
    mode = getattr(batch, "forward_mode", None)
    name = getattr(mode, "name", "")
    if name in ("IDLE", "PREBUILT") or mode is None:
        return None
    try:
        size = int(batch.batch_size())
    except Exception:
        size = len(getattr(batch, "reqs", ()) or ())
    tokens = int(getattr(batch, "extend_num_tokens", 0) or 0)
    if name == "DECODE":
        return IterationInfo(prefill_tokens=0, decode_tokens=size, batch_size=size)
    if name == "TARGET_VERIFY":
        return IterationInfo(prefill_tokens=0, decode_tokens=tokens or size, batch_size=size)
    if name == "MIXED":
        decoding = len(getattr(batch, "decoding_reqs", None) or ())
        return IterationInfo(prefill_tokens=max(tokens - decoding, 1), decode_tokens=decoding, batch_size=size)
    return IterationInfo(prefill_tokens=max(tokens, 1), decode_tokens=0, batch_size=size)
