"""Helper: the frontend's ``LongestRequests``, kept on vLLM's output processor.

The ``request_times`` patch module follows a server's requests where rlprof's step metrics run; a trainer
integration (``sessions.mark_step`` with a trainer's folder) starts following them where the engine was
launched without a profiler directory. Both keep the keeper here, under one attribute.
"""

from __future__ import annotations

import os
from typing import Any

from rlprof_plugins._log import warn_once
from rlprof_plugins.config.launch_config import options_from_environment
from rlprof_plugins.metrics.requests import LongestRequests
from rlprof_plugins.store import servers

KEEPER_ATTR = "_rlprof_longest_requests"


def keep(processor: Any, root: str) -> None:
    """Follow the requests of vLLM's output ``processor`` below ``root`` (its in-flight requests are its own
    ``request_states``)."""
    processor.__dict__[KEEPER_ATTR] = LongestRequests(root, f"frontend-{os.getpid()}",
                                                      in_flight=lambda: processor.request_states)


def follow_at(llm: Any, root: str) -> None:
    """Follow the requests of an engine launched without a profiler directory, below ``root`` (a trainer's
    folder for this server), where they are not followed yet and step metrics are on in
    ``RLPROF_PROFILER_CONFIG`` (or by default)."""
    try:
        processor = llm.output_processor
        if KEEPER_ATTR not in processor.__dict__ and options_from_environment().step_metrics:
            keep(processor, str(servers.server_root(root)))
    except Exception as e:
        warn_once("vllm request times", "rlprof: the requests that held each step are not followed: %s: %s",
                  type(e).__name__, e)
