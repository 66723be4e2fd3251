"""The NPU (torch_npu) recording keys: names, accepted values, defaults.

Pure data and validation, importable without torch_npu, so a bad key fails
at start-up on any machine. Values are spelled as torch_npu spells its own
constants (``Level1``, ``PipeUtilization``), so users can look them up in
Ascend's documentation; ``backends.npu_profiler`` turns them into the real
objects.

Defaults are for RL rollout, where Ascend users report traces of several
TB per stage: level 0 (operators and kernels, no AscendCL API layer), no
AI-core counters, data simplification on (torch_npu deletes the raw
intermediate files after analysis), and no stacks, module hierarchy,
memory or shapes -- each multiplies the recorded data. The step window
bounds the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

# torch_npu.profiler.ProfilerLevel attribute names.
PROFILER_LEVELS = ("Level_none", "Level0", "Level1", "Level2")
# torch_npu.profiler.AiCMetrics attribute names.
AIC_METRICS = ("AiCoreNone", "PipeUtilization", "ArithmeticUtilization", "Memory", "MemoryL0", "MemoryUB",
               "ResourceConflictRatio", "L2Cache", "MemoryAccess")
# torch_npu.profiler.ExportType values.
EXPORT_TYPES = ("text", "db")


@dataclass(frozen=True)
class NpuSettings:
    """What torch_npu records; one field per ``npu_*`` key."""

    profiler_level: str = "Level0"
    aic_metrics: str = "AiCoreNone"
    export_type: tuple[str, ...] = ("text",)
    data_simplification: bool = True
    with_modules: bool = False
    with_stack: bool = False
    with_memory: bool = False
    record_shapes: bool = False
    analyse: bool = True  # write ASCEND_PROFILER_OUTPUT (trace_view.json) before publishing


# key -> NpuSettings field (defaults: DEFAULTS, from NpuSettings)
KEYS: dict[str, str] = {
    "npu_profiler_level": "profiler_level",
    "npu_aic_metrics": "aic_metrics",
    "npu_export_type": "export_type",
    "npu_data_simplification": "data_simplification",
    "npu_with_modules": "with_modules",
    "npu_with_stack": "with_stack",
    "npu_with_memory": "with_memory",
    "npu_record_shapes": "record_shapes",
    "npu_analyse": "analyse",
}
DEFAULTS: dict[str, Any] = {key: getattr(NpuSettings(), attr) for key, attr in KEYS.items()}


def _choice(key: str, value: Any, allowed: tuple[str, ...], error: Callable) -> str:
    if value not in allowed:
        raise error(key, f"must be one of {', '.join(allowed)}, got {value!r}")
    return value


def check_value(key: str, value: Any, error: Callable) -> Any:
    """A validated (normalised) value of one ``npu_*`` key."""
    if key == "npu_profiler_level":
        return _choice(key, value, PROFILER_LEVELS, error)
    if key == "npu_aic_metrics":
        return _choice(key, value, AIC_METRICS, error)
    if key == "npu_export_type":
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)) or not items:
            raise error(key, f"must be \"text\", \"db\" or a list of them, got {value!r}")
        out: list[str] = []
        for item in items:
            if _choice(key, item, EXPORT_TYPES, error) not in out:
                out.append(item)
        return tuple(out)
    if not isinstance(value, bool):
        raise error(key, f"must be true or false, got {value!r}")
    return value


def settings_from(values: dict[str, Any]) -> NpuSettings:
    """NpuSettings from validated ``npu_*`` values (missing keys: defaults)."""
    return NpuSettings(**{attr: values.get(key, DEFAULTS[key]) for key, attr in KEYS.items()})
