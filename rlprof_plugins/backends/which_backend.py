"""Which backend records a session: the ``backend`` key, resolved per device.

``auto`` (the default) records with torch_npu on Ascend and with
torch.profiler everywhere else; the engine's own word for Nsight Systems
(vLLM's ``"profiler": "cuda"``, SGLang's ``CUDA_PROFILER`` activity) picks
``cuda``. Windows, stages, step folders, manifest and status live in the
session controller and do not depend on this choice.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

from ..errors import OptionsError
from . import Backend
from .kind import BuildContext
from .registry import KINDS

BACKENDS = ("auto", *KINDS)


def check_backend(value: Any, error: Callable = OptionsError) -> str:
    """A valid ``backend`` value, one that can record on this host."""
    if value not in BACKENDS:
        raise error("backend", f"must be one of {', '.join(BACKENDS)}, got {value!r}")
    why = KINDS[value].unavailable() if value in KINDS else None
    if why:
        raise error("backend", why)
    return value


def device_type() -> str:
    """``npu`` when torch_npu is loaded and sees a device, else ``cuda``/``cpu``."""
    import torch

    if "torch_npu" in sys.modules and getattr(getattr(torch, "npu", None), "is_available", lambda: False)():
        return "npu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve(backend: str, device: str, profiler: str | None = "torch") -> str:
    """The backend that records on ``device`` (an engine's device type), for the
    engine's ``profiler`` (``cuda``: Nsight Systems, whatever the device)."""
    if profiler == "cuda":
        if backend not in ("auto", "cuda"):
            raise OptionsError("backend", f'{backend!r} contradicts "profiler": "cuda" (Nsight Systems records; '
                                          'rlprof marks its ranges): leave backend at auto')
        backend = "cuda"
    if backend == "auto":
        return next((k.name for k in KINDS.values() if device in k.devices), "torch")
    why = KINDS[backend].refuses.get(device)
    if why:
        raise OptionsError("backend", why)
    return backend


def factory(kind: str, context: BuildContext) -> Callable[..., Backend]:
    """A session controller's ``backend_factory`` for the resolved ``kind``:
    a fresh backend per session, built from ``context`` (a request's torch
    overrides have no meaning for a backend that is not torch's), or of the
    kind a request asks for (``backend``: SGLang's ``CUDA_PROFILER`` asks for ``cuda``)."""
    def build(table: bool, overrides: dict, backend: str | None = None) -> Backend:
        return KINDS[backend or kind].build(context, table, overrides)

    return build


def for_request(backends: Callable[..., Backend], request: Any) -> Backend:
    """A fresh backend for one session's ``StartRequest``: of the kind it asks for
    (``backend``), told the step it records where it names its ranges by it (``name_session``)."""
    asked = {"backend": request.backend} if getattr(request, "backend", None) else {}
    backend = backends(request.operator_table, dict(request.torch_overrides or {}), **asked)
    name_session = getattr(backend, "name_session", None)
    if name_session is not None:
        name_session(request.global_step, request.session_id)
    return backend
