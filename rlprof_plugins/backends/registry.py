"""Every backend rlprof can record with, each declared once where it is written.

A backend module declares one ``BackendKind`` (``kind.py``): the ``backend``
value that picks it, the devices it records on (and the ones it refuses, with
why), its own configuration keys with their defaults and validation, a check
that it can record here at all, and how to build one for a session from what
the engine patch knows (``BuildContext``). ``KINDS`` lists them; the options
(``config.options``: which keys exist, their defaults, the errors naming
them), the choice of backend per device (``which_backend``) and the engine patches
read them only here. Adding a backend is its module plus one line in
``KINDS``. Importing this imports no backend's heavy dependency: torch,
torch_npu and nvtx load when a backend is built.
"""

from __future__ import annotations

from typing import Any

from .cuda_profiler import KIND as CUDA
from .kind import BackendKind
from .npu_profiler import KIND as NPU
from .torch_profiler import KIND as TORCH

KINDS: dict[str, BackendKind] = {kind.name: kind for kind in (TORCH, NPU, CUDA)}
KEYS: dict[str, Any] = {key: default for kind in KINDS.values() for key, default in kind.keys.items()}


def kind_of_key(key: str) -> BackendKind:
    """The backend whose configuration ``key`` is."""
    return next(kind for kind in KINDS.values() if key in kind.keys)
