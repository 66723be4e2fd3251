"""Which backend records a session: the ``backend`` key, resolved per device.

``auto`` (the default) records with torch_npu on Ascend and with
torch.profiler everywhere else. Windows, stages, step folders, manifest and
status live in the session controller and do not depend on this choice.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any, Callable

from ..errors import OptionsError
from . import Backend
from .npu_options import NpuSettings
from .torch_profiler import TorchProfilerBackend, TorchSettings

BACKENDS = ("auto", "torch", "npu")


def check_backend(value: Any, error: Callable = OptionsError) -> str:
    """A valid ``backend`` value; ``npu`` also needs torch_npu installed."""
    if value not in BACKENDS:
        raise error("backend", f"must be one of {', '.join(BACKENDS)}, got {value!r}")
    if value == "npu" and importlib.util.find_spec("torch_npu") is None:
        raise error("backend", "npu records with torch_npu.profiler, and torch_npu is not installed here")
    return value


def device_type() -> str:
    """``npu`` when torch_npu is loaded and sees a device, else ``cuda``/``cpu``."""
    import torch

    if "torch_npu" in sys.modules and getattr(getattr(torch, "npu", None), "is_available", lambda: False)():
        return "npu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve(backend: str, device: str) -> str:
    """The backend that records on ``device`` (an engine's device type)."""
    if backend == "auto":
        return "npu" if device == "npu" else "torch"
    if backend == "torch" and device == "npu":
        # torch_npu swaps torch.profiler.profile for its own on Ascend
        # (SGLang applies that swap), so "torch" would record through
        # torch_npu with torch's options and export a trace without NPU data.
        raise OptionsError("backend", "torch records no NPU activity on Ascend; use npu (or auto)")
    return backend


def factory(kind: str, torch_settings: Callable[[bool, dict], TorchSettings], npu: NpuSettings,
            extra_metadata: dict[str, str] | None = None) -> Callable[[bool, dict], Backend]:
    """A session controller's ``backend_factory`` for the resolved ``kind``.

    ``torch_settings(operator_table, overrides)`` gives one session's torch
    settings; a request's torch overrides (activities, stack...) have no
    NPU meaning and are ignored by the NPU backend.
    """
    if kind == "npu":
        from .npu_profiler import NpuProfilerBackend

        return lambda table, overrides: NpuProfilerBackend(npu, extra_metadata)
    return lambda table, overrides: TorchProfilerBackend(torch_settings(table, overrides))
