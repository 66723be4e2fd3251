"""Helper: what one vLLM engine iteration scheduled: prompt vs generation tokens.

The worker patch classifies each iteration it counts (``stages``: prefill or
decode) from the ``SchedulerOutput`` it runs, the way vLLM's own trace
annotation counts them where the release has ``compute_iteration_details``
(0.15+), and by rlprof's own rule before.
"""

from __future__ import annotations

from typing import Any

from rlprof_plugins.stages import IterationInfo


def _iteration_details_before_0_15(scheduler_output: Any) -> IterationInfo:
    """vLLM < 0.15 has no ``compute_iteration_details``: a newly scheduled
    request is in its context phase; a cached one scheduled for more than one
    token is a chunked-prefill continuation (speculative decoding would also
    schedule several tokens: counted as prefill there)."""
    new = {r.req_id for r in scheduler_output.scheduled_new_reqs}
    prefill = decode = prefill_reqs = decode_reqs = 0
    for req_id, tokens in scheduler_output.num_scheduled_tokens.items():
        if req_id in new or tokens > 1:
            prefill, prefill_reqs = prefill + tokens, prefill_reqs + 1
        else:
            decode, decode_reqs = decode + tokens, decode_reqs + 1
    return IterationInfo(prefill_tokens=prefill, decode_tokens=decode, batch_size=prefill_reqs + decode_reqs)


def iteration_info(scheduler_output: Any) -> IterationInfo | None:
    """Prompt vs generation tokens of one iteration, as vLLM's own trace
    annotation counts them (``compute_iteration_details``: a request is in
    its context phase until it has produced a token, so chunked-prefill
    chunks count as prompt tokens)."""
    try:
        try:
            from vllm.v1.utils import compute_iteration_details
        except ImportError:
            return _iteration_details_before_0_15(scheduler_output)

        d = compute_iteration_details(scheduler_output)
        return IterationInfo(
            prefill_tokens=d.num_ctx_tokens,
            decode_tokens=d.num_generation_tokens,
            batch_size=d.num_ctx_requests + d.num_generation_requests,
        )
    except Exception:
        return None


def quick_info(scheduler_output: Any) -> IterationInfo | None:
    """The stage of an iteration no session records, for the step metrics, in O(1): new requests,
    or more tokens than requests (a prompt chunk, a request resumed), make it prefill, by the rule of
    ``rlprof_plugins.stages``; the generated tokens are the carried-over requests' one each.
    ``compute_iteration_details`` walks every request (tens of microseconds at large batches): it
    stays for recorded iterations, whose traces name exact counts."""
    try:
        batch = len(scheduler_output.num_scheduled_tokens)
        total = int(scheduler_output.total_num_scheduled_tokens)
        new = len(scheduler_output.scheduled_new_reqs)
    except Exception:
        return None
    if new == 0 and total <= batch:
        return IterationInfo(prefill_tokens=0, decode_tokens=total, batch_size=batch)
    decoding = min(batch - new, total - 1)
    return IterationInfo(prefill_tokens=total - decoding, decode_tokens=decoding, batch_size=batch)

