"""A stand-in for ``torch.cuda.memory``'s allocator-history API, for hosts without a GPU.

Test scaffolding, never shipped. It mirrors the signatures of the functions
rlprof's memory history calls (``_record_memory_history`` and its
``_record_memory_history_impl``, ``_snapshot``, ``_dump_snapshot``; checked
against torch's installed source and torch_npu 2.14.0's by
tests/unit/test_memory_history.py) and answers in the snapshot format torch
documents in ``_snapshot``'s docstring: ``segments`` (each with its
``blocks``) and ``device_traces`` (one list per device of ``alloc``,
``free_requested``, ``free_completed``, ``segment_alloc`` entries with
``addr``, ``size``, ``frames`` and ``time_us``), a ring buffer of at most
``max_entries``. What the real allocator does that it does not: streams,
block splitting, caching policy beyond "a new segment when nothing fits".

The workload the tests run in place of an engine calls ``malloc``/``free``
(not torch API: the stand-in's own), which record the caller's Python frames
when the history asks for them.
"""

from __future__ import annotations

import pickle
import sys
import time
import traceback
from typing import Any

SMALL, LARGE_SEGMENT = 1 << 20, 2 << 20  # torch's small/large split and its large segment granularity
ROUND = 512


class AllocatorStandIn:
    """One device's caching allocator with a history, as ``torch.cuda.memory`` exposes it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []
        self._enabled: str | None = None
        self._context: str | None = None
        self._stacks = "all"
        self._max_entries = sys.maxsize
        self._trace: list[dict] = []
        self._segments: list[dict] = []
        self._next_address = 0x7F0000000000
        self._blocks: dict[int, dict] = {}

    # ---- torch.cuda.memory's functions (signatures as in torch 2.13) ----
    def _record_memory_history(self, enabled: str | None = "all", *args: Any, **kwargs: Any) -> None:
        return self._record_memory_history_impl(enabled, *args, **kwargs)

    def _record_memory_history_impl(self, enabled: str | None = "all", context: str | None = "all",
                                    stacks: str = "all", max_entries: int = sys.maxsize, device: Any = None,
                                    clear_history: bool = False, compile_context: bool = False,
                                    global_record_annotations: bool = False,
                                    skip_actions: list[str] | None = None) -> None:
        self.calls.append(("_record_memory_history", {"enabled": enabled, "context": context, "stacks": stacks,
                                                      "max_entries": max_entries}))
        if enabled not in (None, "state", "all"):
            raise ValueError(f"enabled must be None, 'state' or 'all', got {enabled!r}")
        if stacks not in ("python", "all"):
            raise ValueError(f"stacks must be 'python' or 'all', got {stacks!r}")
        self._enabled, self._context, self._stacks, self._max_entries = enabled, context, stacks, max_entries
        if enabled is None or clear_history:
            self._trace = []  # disabling clears the history, as the CUDA caching allocator does

    def _snapshot(self, device: Any = None, augment_with_fx_traces: bool = False) -> dict[str, Any]:
        self.calls.append(("_snapshot", {}))
        segments = []
        for seg in self._segments:
            blocks = [dict(b) for b in seg["blocks"]]
            allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
            segments.append({**{k: v for k, v in seg.items() if k != "blocks"}, "blocks": blocks,
                             "allocated_size": allocated, "active_size": allocated,
                             "requested_size": sum(b["requested_size"] for b in blocks
                                                   if b["state"] == "active_allocated")})
        return {"segments": segments, "device_traces": [[dict(e) for e in self._trace]],
                "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": ""}}

    def _dump_snapshot(self, filename: str = "dump_snapshot.pickle", augment_with_fx_traces: bool = False) -> None:
        with open(filename, "wb") as f:
            pickle.dump(self._snapshot(augment_with_fx_traces=augment_with_fx_traces), f)

    # ---- the stand-in's own: what a workload allocates ----
    @property
    def recording(self) -> bool:
        return self._enabled == "all"

    def malloc(self, size: int) -> int:
        """Allocate ``size`` bytes; returns the block's address."""
        rounded = max(ROUND, -(-size // ROUND) * ROUND)
        seg = next((s for s in self._segments if s["segment_type"] == ("small" if rounded < SMALL else "large")
                    and s["total_size"] - s["_used"] >= rounded), None)
        if seg is None:
            total = LARGE_SEGMENT if rounded < SMALL else -(-rounded // LARGE_SEGMENT) * LARGE_SEGMENT
            seg = {"device": 0, "address": self._take(total), "total_size": total, "stream": 0,
                   "segment_type": "small" if rounded < SMALL else "large", "segment_pool_id": (0, 0),
                   "is_expandable": False, "frames": [], "blocks": [], "_used": 0}
            self._segments.append(seg)
            self._record("segment_alloc", seg["address"], total)
        address = seg["address"] + seg["_used"]
        seg["_used"] += rounded
        frames = self._frames()
        block = {"address": address, "size": rounded, "requested_size": size, "state": "active_allocated",
                 "frames": frames}
        seg["blocks"].append(block)
        self._blocks[address] = block
        self._record("alloc", address, rounded, frames)
        return address

    def free(self, address: int) -> None:
        block = self._blocks.pop(address)
        block["state"] = "inactive"
        self._record("free_requested", address, block["size"])
        self._record("free_completed", address, block["size"])

    def _take(self, size: int) -> int:
        address, self._next_address = self._next_address, self._next_address + size
        return address

    def _frames(self) -> list[dict]:
        if self._context is None or self._enabled is None:
            return []
        stack = traceback.extract_stack()[:-2]  # from malloc's caller out, innermost first below
        return [{"filename": f.filename, "line": f.lineno, "name": f.name} for f in reversed(stack)]

    def _record(self, action: str, address: int, size: int, frames: list[dict] | None = None) -> None:
        if self._enabled != "all":
            return
        self._trace.append({"action": action, "addr": address, "size": size, "stream": 0,
                            "time_us": time.time_ns() // 1000, "compile_context": "N/A", "user_metadata": "",
                            "frames": frames or []})
        if len(self._trace) > self._max_entries:
            del self._trace[0]  # a ring buffer keeps the newest entries
