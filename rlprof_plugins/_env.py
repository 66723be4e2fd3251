"""The environment's switches, read one way everywhere.

A leaf with no imports of its own, so the ``.pth`` bootstrap can use it in
every Python process at no cost.
"""

from __future__ import annotations

import os

PLUGIN_NAME = "rlprof"  # the entry-point name engines list in VLLM_PLUGINS / SGLANG_PLUGINS


def on(name: str) -> bool:
    """A switch such as ``RLPROF_DISABLE=1``: ``1``, ``true`` or ``yes``, in any case."""
    return os.environ.get(name, "").lower() in ("1", "true", "yes")


def allowed_by(name: str) -> bool:
    """Whether an engine's plugin allowlist (``VLLM_PLUGINS``, ``SGLANG_PLUGINS``)
    lets rlprof load: unset allows every plugin."""
    allow = os.environ.get(name)
    return allow is None or PLUGIN_NAME in [p.strip() for p in allow.split(",")]
