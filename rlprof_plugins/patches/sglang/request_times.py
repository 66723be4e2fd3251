"""Patch module (the server's main process): the requests that held each step, timed by SGLang's tokenizer manager.

Every request's answer passes through ``TokenizerManager._handle_batch_output``
(one call per batch the detokenizer sends back), and SGLang keeps each
request's times on its state whatever the server's metrics settings
(``time_stats``: created, first token, finished). The wrapper hands the
requests a batch finishes, with those times and their token counts, to
``metrics.requests.LongestRequests`` (kept on the tokenizer manager), and
tells it when nothing is in flight. SGLang's method runs unchanged; a failure
here is logged once and the requests are no longer followed.
"""

from __future__ import annotations

import time
from typing import Any

from rlprof_plugins._log import warn_once
from rlprof_plugins.config.launch_config import from_environment

from ..base import Patch
from ..features import LONGEST_REQUESTS
from .facts import BELOW
from .request_keeper import KEEPER_ATTR, keep

REQUEST_TIMES_VERSIONS = f">=0.5.15,<{BELOW}"  # the request state's time_stats, shapes checked


def _stop_following(manager: Any, error: Exception) -> None:
    manager.__dict__.pop(KEEPER_ATTR, None)
    warn_once("sglang request times", "rlprof: the requests that held each step are no longer followed: %s: %s",
              type(error).__name__, error)


def _follow(wrapped, instance, args, kwargs):
    """``TokenizerManager.__init__``: where rlprof's step metrics run, the requests are followed."""
    wrapped(*args, **kwargs)
    try:
        config = from_environment()
        root = config.server_root() if config is not None else None
        if root is not None and config.options.step_metrics:
            keep(instance, root)
    except Exception as e:
        warn_once("sglang request times", "rlprof: the requests that held each step are not followed: %s: %s",
                  type(e).__name__, e)


def _handle_batch_output(wrapped, instance, args, kwargs):
    keeper = instance.__dict__.get(KEEPER_ATTR)
    if keeper is None:
        return wrapped(*args, **kwargs)
    try:
        batch = args[0] if args else kwargs["recv_obj"]
        if not any(batch.finished_reasons):  # nothing ends here, so nothing can leave the frontend idle either
            return wrapped(*args, **kwargs)
        states = instance.rid_to_state  # the states go with the batch: taken before SGLang's method runs
        finishing = [(i, states[rid]) for i, (rid, reason) in enumerate(zip(batch.rids, batch.finished_reasons))
                     if reason is not None and rid in states]
    except Exception as e:
        _stop_following(instance, e)
        return wrapped(*args, **kwargs)
    return _followed(wrapped(*args, **kwargs), keeper, instance, batch, finishing)


async def _followed(handled, keeper: LongestRequests, manager: Any, batch: Any, finishing: list) -> Any:
    out = await handled
    try:
        wall = time.time() - time.perf_counter()  # SGLang's times are perf_counter's
        completion = getattr(batch, "completion_tokens", None)
        for i, state in finishing:
            times = state.time_stats
            if not times.finished_time or not times.created_time:
                continue
            keeper.finished(batch.rids[i], batch.prompt_tokens[i],
                            completion[i] if completion is not None else 0, at=wall + times.finished_time,
                            arrived_at=wall + times.created_time,
                            first_token_at=wall + times.first_token_time if times.first_token_time else None)
        if not manager.rid_to_state:
            keeper.idle()
    except Exception as e:
        _stop_following(manager, e)
    return out


REQUEST_TIMES_PATCH = Patch(
    name="sglang.request_times.tokenizer_manager",
    engine="sglang",
    versions=REQUEST_TIMES_VERSIONS,
    module="sglang.srt.managers.tokenizer_manager",
    feature=LONGEST_REQUESTS,
    why="hand each finished request's times (kept by SGLang on its state) to the requests that held each step",
    upstream="a hook on a request's end with its times",
    wrap={"TokenizerManager.__init__": _follow, "TokenizerManager._handle_batch_output": _handle_batch_output},
    relies_on={"sglang.srt.managers.tokenizer_manager:ReqState": "fields:time_stats",
               "sglang.srt.observability.req_time_stats:APIServerReqTimeStats":
                   "fields:created_time,first_token_time,finished_time"},
)

PATCHES = (REQUEST_TIMES_PATCH,)
