"""``rlprof doctor``'s backends: which recorders a session can use on the engine release here.

For each backend in ``backends.registry``: whether this release offers it and
what picks it (each engine's ``BACKENDS`` facts), and whether it can record on
this host (the backend's own ``unavailable``). For the cuda backend (Nsight
Systems), whether this process sees CUDA: without it, sessions emit their
NVTX ranges and skip the capture calls.
"""

from __future__ import annotations

import importlib.util

from ..backends.registry import KINDS
from ..patches.engines import ENGINES
from .compatibility import _in


def _cuda_here() -> bool | None:
    """Whether torch sees a CUDA device (None: torch is not installed)."""
    if importlib.util.find_spec("torch") is None:
        return None
    import torch

    return bool(torch.cuda.is_available())


def backends(engine: str, version: str, *, probe: bool = True) -> list[dict]:
    """One entry per backend: ``available`` on this release and host, and why or how it is picked."""
    out = []
    for name, spec, chosen_by in getattr(ENGINES[engine], "BACKENDS", ()):
        kind = KINDS[name]
        if not _in(version, spec):
            out.append({"backend": name, "available": False, "reason": f"needs {ENGINES[engine].TITLE} {spec}"})
            continue
        why = kind.unavailable()
        note = chosen_by
        if name == "cuda" and not why and probe and _cuda_here() is False:
            note += "; no CUDA device here: NVTX ranges only, the capture calls skipped"
        out.append({"backend": name, "available": why is None, "reason": why or note})
    return out


def backend_lines(entries: list[dict]) -> list[str]:
    lines = ["  backends:"]
    for b in entries:
        lines.append(f"    [{'yes' if b['available'] else 'no ':3}] {b['backend']}: {b['reason']}")
    return lines
