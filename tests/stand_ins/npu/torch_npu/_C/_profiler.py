"""``torch_npu._C._profiler.ProfilerActivity`` (a pybind enum in the real package)."""

import enum


class ProfilerActivity(enum.Enum):
    CPU = 0
    NPU = 1
