"""Patch module (the offline user's process): the patch of ``sglang.Engine.start_profile``/``stop_profile``: the offline users' entry point.

``sglang.Engine`` (slime's and other offline users' entry point) calls its
tokenizer manager; from SGLang 0.5.15 its ``start_profile(**fields)`` first
builds a ``ProfileReq``, which raises ``TypeError`` for a field SGLang does
not define (rlprof's ``global_step``, vLLM's ``delay_iterations``). rlprof
takes the fields as they are and sends them the way the HTTP route does
(``http.start``/``http.stop``); the calls return the session's status where
SGLang's return None.
"""

from __future__ import annotations

from . import sessions
from ..base import Patch
from ..features import IN_PROCESS_CALLS
from .facts import VERSIONS
from .start_requests import server_config


def _wrap_engine_start(wrapped, instance, args, kwargs):
    """``sglang.Engine.start_profile(**fields)``: from 0.5.15 it builds a
    ``ProfileReq`` first, which raises ``TypeError`` for a field SGLang does
    not define (``global_step``); rlprof takes the fields as they are."""
    config = server_config()
    if args or (config is None and not sessions.uses_rlprof(kwargs)):
        return wrapped(*args, **kwargs)
    return instance.loop.run_until_complete(sessions.start(instance.tokenizer_manager, kwargs, config))


def _wrap_engine_stop(wrapped, instance, args, kwargs):
    if sessions.stop_is_native():
        return wrapped(*args, **kwargs)
    return instance.loop.run_until_complete(sessions.stop(instance.tokenizer_manager, kwargs.get("wait")))


ENGINE_PATCH = Patch(
    name="sglang.engine.profile",
    engine="sglang",
    versions=VERSIONS,
    module="sglang.srt.entrypoints.engine",
    feature=IN_PROCESS_CALLS,
    why=("sglang.Engine.start_profile(**kwargs) builds a ProfileReq from 0.5.15, which refuses rlprof's and "
         "vLLM's fields with TypeError"),
    upstream="Engine.start_profile forwarding its keywords to the tokenizer manager's request",
    wrap={"Engine.start_profile": _wrap_engine_start, "Engine.stop_profile": _wrap_engine_stop},
)

PATCHES = (ENGINE_PATCH,)
