"""What a start request asks a session to record: torch.profiler's settings and the memory history.

Three engines' words for it, one meaning: vLLM 0.33's ``profiler_kwargs``,
SGLang's ``activities``/``with_stack``/``record_shapes`` (its ``MEM``
activity is the allocator's memory history) and rlprof's ``memory``. Each is
checked here, naming the field, before anything is sent to a worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..backends import memory_history
from ..backends.stack_sampler import MAX_HZ
from ..backends.torch_profiler import STACK_MODES
from ..errors import RequestError
from .launch_config import check_activities_on_host, parse_activities
from .options import check_flag

# vLLM 0.33's per-session torch.profiler keywords (``profiler_kwargs``), as the
# TorchSettings field each one sets. Any other key is refused (vLLM would hand
# it to torch.profiler unchecked).
PROFILER_KWARGS = {"record_shapes": "record_shapes", "profile_memory": "with_memory", "with_stack": "with_stack",
                   "with_flops": "with_flops", "with_modules": "with_modules"}
MEM = "MEM"  # SGLang's activity for the allocator's memory history
CUDA_PROFILER = "CUDA_PROFILER"  # SGLang's activity for Nsight Systems: the cuda backend (backends.cuda_profiler)


@dataclass(frozen=True)
class Recorded:
    """One session's recording: torch settings over the server's, whether a trace is
    recorded at all (SGLang's ``activities: ["MEM"]`` asks for memory alone), the memory history."""

    torch_overrides: dict[str, Any]
    trace: bool = True
    memory: bool = False
    backend: str | None = None  # a backend this session asks for (CUDA_PROFILER: cuda); None: the server's


def parse_profiler_kwargs(value: Any) -> dict[str, bool]:
    """``profiler_kwargs`` as TorchSettings overrides; a bad key or value names it."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RequestError("profiler_kwargs", f"must be an object of torch.profiler settings, got {value!r}")
    out = {}
    for key, flag in value.items():
        if key not in PROFILER_KWARGS:
            raise RequestError(f"profiler_kwargs.{key}", "not a per-session setting rlprof records; accepted: "
                                                         + ", ".join(PROFILER_KWARGS))
        out[PROFILER_KWARGS[key]] = check_flag(f"profiler_kwargs.{key}", flag, error=RequestError)
    return out


def parse_recorded(given: Mapping[str, Any], *, device: str, memory_default: bool) -> Recorded:
    """vLLM's ``profiler_kwargs``, SGLang's ``activities``/``with_stack``/
    ``record_shapes`` and rlprof's ``memory`` and ``python_stacks``, as one session's recording on a
    host of ``device``."""
    overrides: dict[str, Any] = parse_profiler_kwargs(given.get("profiler_kwargs"))
    activities = given.get("activities")
    backend = _asked_backend(activities, device)
    if backend is not None:  # the cuda backend records the session; MEM beside it, the memory history
        activities = [a for a in activities if a.upper() != CUDA_PROFILER]
    mem = isinstance(activities, (list, tuple)) and any(isinstance(a, str) and a.upper() == MEM for a in activities)
    trace = True
    if "activities" in given and backend is None:
        traced = [a for a in activities if not (isinstance(a, str) and a.upper() == MEM)] if mem else activities
        trace = bool(traced) or not mem
        if trace:
            overrides["activities"] = parse_activities("activities", traced, error=RequestError)
            check_activities_on_host("activities", overrides["activities"], device, error=RequestError)
    for name in ("with_stack", "record_shapes"):
        if name in given:
            value = check_flag(name, given[name], error=RequestError)
            if overrides.get(name, value) != value:
                raise RequestError(name, f"contradicts profiler_kwargs.{name}")
            overrides[name] = value
    if given.get("python_stacks") is not None:
        mode = given["python_stacks"]
        if mode not in STACK_MODES:
            raise RequestError("python_stacks", f"must be one of {', '.join(STACK_MODES)}, got {mode!r}")
        if "with_stack" in overrides and overrides["with_stack"] != (mode == "exact"):
            raise RequestError("python_stacks", f"{mode!r} contradicts with_stack "
                                                f"{str(overrides['with_stack']).lower()} (exact stacks are with_stack)")
        overrides["python_stacks"] = mode
    if given.get("sample_hz") is not None:
        hz = given["sample_hz"]
        if isinstance(hz, bool) or not isinstance(hz, int) or not 1 <= hz <= MAX_HZ:
            raise RequestError("sample_hz", f"must be an integer from 1 to {MAX_HZ} (samples a second), got {hz!r}")
        overrides["sample_hz"] = hz
    memory = memory_default
    if "memory" in given:
        memory = check_flag("memory", given["memory"], error=RequestError)
        if mem and not memory:
            raise RequestError("memory", "false contradicts activities, which asks for MEM")
    memory = memory or mem
    if memory:
        why = memory_history.unavailable(device)
        if why:
            raise RequestError("activities" if mem else "memory", why)
    return Recorded(overrides, trace, memory, backend)


def _asked_backend(activities: Any, device: str) -> str | None:
    """``cuda`` for SGLang's ``CUDA_PROFILER`` activity: Nsight Systems records the session
    and rlprof marks it (NVTX ranges, a capture range). torch.profiler's activities beside it
    would be a second profiler over the same window: refused, naming the field."""
    if not isinstance(activities, (list, tuple)):
        return None
    names = [a.upper() for a in activities if isinstance(a, str)]
    if CUDA_PROFILER not in names:
        return None
    other = [a for a in activities if not (isinstance(a, str) and a.upper() in (CUDA_PROFILER, MEM))]
    if other:
        raise RequestError("activities", f"CUDA_PROFILER (Nsight Systems) records alone, with MEM at most; "
                                         f"got {list(activities)!r}: ask for torch's {other!r} in another session")
    if device == "npu":
        raise RequestError("activities", "CUDA_PROFILER captures CUDA devices; this Ascend host has none")
    return "cuda"
