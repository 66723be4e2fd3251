"""Helper: the frontend's ``LongestRequests``, kept on SGLang's tokenizer manager.

The ``request_times`` patch module follows a server's requests where rlprof's step metrics run; a trainer
integration (``sessions.mark_step`` with a trainer's folder) starts following them where the server was
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


def keep(manager: Any, root: str) -> None:
    """Follow the requests of SGLang's tokenizer ``manager`` below ``root``."""
    manager.__dict__[KEEPER_ATTR] = LongestRequests(root, f"frontend-{os.getpid()}")


def follow_at(manager: Any, root: str) -> None:
    """Follow the requests of a server launched without a profiler directory, below ``root`` (a trainer's
    folder for this server), where they are not followed yet and step metrics are on in
    ``RLPROF_PROFILER_CONFIG`` (or by default)."""
    try:
        if KEEPER_ATTR not in manager.__dict__ and options_from_environment().step_metrics:
            keep(manager, str(servers.server_root(root)))
    except Exception as e:
        warn_once("sglang request times", "rlprof: the requests that held each step are not followed: %s: %s",
                  type(e).__name__, e)
