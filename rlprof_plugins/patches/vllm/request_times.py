"""Patch module (API server, or the trainer's process): the requests that held each step, timed by vLLM's frontend.

``AsyncLLM`` (the server's and verl's engine) and ``LLMEngine`` (under the
offline ``LLM`` that OpenRLHF- and TRL-style trainers call) hand every
request to their ``OutputProcessor``, and every engine iteration's outputs
pass through it. vLLM keeps a request's times
only with ``log_stats``, which RL trainers turn off (verl does), so the
wrappers note them for ``metrics.requests.LongestRequests``, kept on the
output processor: a request's arrival (``add_request``: the arrival time
vLLM stamps on it), its first output token (``process_outputs``, looked for
only while some request has none yet), its end (``_finish_request``), and
the moments nothing is in flight. vLLM's methods run unchanged, before or
after; a failure here is logged once and this frontend's requests are no
longer followed.
"""

from __future__ import annotations

import time
from typing import Any

from rlprof_plugins._log import warn_once

from ..base import Patch
from ..features import LONGEST_REQUESTS
from . import sessions
from .config import options_of, plugin_handles, root_of
from .facts import BELOW, WEIGHT_VERSION_FIRST
from .request_keeper import KEEPER_ATTR, keep

REQUEST_TIMES_VERSIONS = f">={WEIGHT_VERSION_FIRST},<{BELOW}"  # the releases RL trainers run, shapes checked


def _stop_following(processor: Any, error: Exception) -> None:
    processor.__dict__.pop(KEEPER_ATTR, None)
    warn_once("vllm request times", "rlprof: the requests that held each step are no longer followed on this "
              "frontend: %s: %s", type(error).__name__, error)


def _follow(wrapped, instance, args, kwargs):
    """``AsyncLLM.__init__``, ``LLMEngine.__init__``: where rlprof's step metrics run, the engine's output
    processor's requests are followed."""
    wrapped(*args, **kwargs)
    try:
        cfg = sessions.config_of(instance)
        if plugin_handles(cfg) and options_of(cfg).step_metrics:
            keep(instance.output_processor, root_of(cfg))
    except Exception as e:
        warn_once("vllm request times", "rlprof: the requests that held each step are not followed: %s: %s",
                  type(e).__name__, e)


def _add_request(wrapped, instance, args, kwargs):
    keeper = instance.__dict__.get(KEEPER_ATTR)
    if keeper is not None:
        try:
            request = args[0] if args else kwargs["request"]
            if request.request_id not in instance.request_states:  # not a streaming request's next input
                if not instance.request_states:
                    keeper.idle()
                keeper.arrived(request.request_id, request.arrival_time)
        except Exception as e:
            _stop_following(instance, e)
    return wrapped(*args, **kwargs)


def _process_outputs(wrapped, instance, args, kwargs):
    keeper = instance.__dict__.get(KEEPER_ATTR)
    if keeper is not None and keeper.awaiting_first:
        try:
            outputs = args[0] if args else kwargs["engine_core_outputs"]
            keeper.first_tokens((output.request_id for output in outputs), time.time())
        except Exception as e:
            _stop_following(instance, e)
    out = wrapped(*args, **kwargs)
    if keeper is not None and not instance.request_states:
        try:
            keeper.idle()
        except Exception as e:
            _stop_following(instance, e)
    return out


def _finish_request(wrapped, instance, args, kwargs):
    out = wrapped(*args, **kwargs)
    keeper = instance.__dict__.get(KEEPER_ATTR)
    if keeper is not None:
        try:
            state = args[0] if args else kwargs["req_state"]
            detokenizer, stats = state.detokenizer, state.stats
            queued = None
            if stats is not None and stats.scheduled_ts and stats.queued_ts:  # with log_stats
                queued = stats.scheduled_ts - stats.queued_ts
            keeper.finished(state.request_id, state.prompt_len or 0,
                            detokenizer.num_output_tokens() if detokenizer is not None else 0,
                            shown_as=state.external_req_id, queued_s=queued)
        except Exception as e:
            _stop_following(instance, e)
    return out


FOLLOW_PATCH = Patch(
    name="vllm.request_times.async_llm",
    engine="vllm",
    versions=REQUEST_TIMES_VERSIONS,
    module="vllm.v1.engine.async_llm",
    feature=LONGEST_REQUESTS,
    why="give the frontend's output processor somewhere to keep the requests that held each step",
    upstream="per-request times kept without log_stats, with a hook for them",
    wrap={"AsyncLLM.__init__": _follow},
)

FOLLOW_OFFLINE_PATCH = Patch(
    name="vllm.request_times.llm_engine",
    engine="vllm",
    versions=REQUEST_TIMES_VERSIONS,
    module="vllm.v1.engine.llm_engine",
    feature=LONGEST_REQUESTS,
    why="the same for the offline LLM's engine, which trainers that generate in their own process call",
    upstream="the same as for AsyncLLM",
    wrap={"LLMEngine.__init__": _follow},
)

OUTPUT_PROCESSOR_PATCH = Patch(
    name="vllm.request_times.output_processor",
    engine="vllm",
    versions=REQUEST_TIMES_VERSIONS,
    module="vllm.v1.engine.output_processor",
    feature=LONGEST_REQUESTS,
    why="note each request's arrival, first token and end, and when nothing is in flight, where vLLM keeps "
        "no times without log_stats",
    upstream="the same as for AsyncLLM",
    wrap={"OutputProcessor.add_request": _add_request, "OutputProcessor.process_outputs": _process_outputs,
          "OutputProcessor._finish_request": _finish_request},
    relies_on={"vllm.v1.engine.output_processor:RequestState": "params:request_id,external_req_id"},
)

PATCHES = (FOLLOW_PATCH, FOLLOW_OFFLINE_PATCH, OUTPUT_PROCESSOR_PATCH)
