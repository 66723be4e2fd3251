"""What a trace says of the stack sampler that recorded its Python stacks: one metadata key.

A session with sampled Python stacks (``backends.stack_sampler``) writes ``rlprof_sampler`` into its
trace's header: how it sampled (``how``: the signal timer on the engine thread, or a sampler thread)
and at what rate (``hz``), so a reader knows what one sample stands for; and, written as the session
stops, how many samples it took (``samples``) and the engine time they cost (``busy_us``), so a reader
knows how much of the recorded time the sampler itself added. A chunked session's traces are joined
into one (``trace.rewrite.stitch``): its account is the chunks' accounts added together.
"""

from __future__ import annotations

from typing import Any

SAMPLER_KEY = "rlprof_sampler"
COUNTED = ("samples", "busy_us")  # what adds up across the chunks of one session


def combined(accounts: list[Any]) -> dict[str, Any] | None:
    """One session's account from its chunks' (in recording order; a chunk without one is skipped): the
    first chunk's description, the counts added up over every chunk that has them. None: no chunk had one."""
    found = [a for a in accounts if isinstance(a, dict)]
    if not found:
        return None
    out = dict(found[0])
    for key in COUNTED:
        values = [a[key] for a in found if isinstance(a.get(key), (int, float))]
        if values:
            out[key] = round(sum(values), 1) if key == "busy_us" else sum(values)
    return out
