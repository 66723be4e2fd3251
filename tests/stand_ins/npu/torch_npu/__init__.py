"""Stand-in for torch_npu (Ascend): the profiler API rlprof calls, and nothing else.

No NPU and no CANN exist on the machines that run rlprof's tests, and the
real torch_npu cannot be imported without CANN. This package mirrors the
signatures of the real ``torch_npu.profiler`` API that rlprof's NPU backend
calls (checked against torch_npu 2.14.0's source by
tests/npu/test_standin_matches_torch_npu.py) and records every call. It
records host activity with the real torch.profiler underneath, so the
directories it writes hold the same kind of framework events a real
torch_npu run records, but no device (NPU) events.

It is test scaffolding: never shipped, on ``sys.path`` only in NPU tests.
"""

import types

import torch

from ._import_only import missing

__version__ = "2.14.0+rlprof.standin"
STANDIN = True


class _DeviceModule(types.ModuleType):
    """``torch.npu``: the real torch_npu registers this device module.
    vllm-ascend names its types at import time (annotations, base classes);
    each unknown attribute is a type whose use raises ImportError."""

    def is_available(self) -> bool:
        return False  # there is no NPU here

    def device_count(self) -> int:
        return 0

    def __getattr__(self, item: str):
        if item.startswith("__"):
            raise AttributeError(item)
        value = missing(f"torch.npu.{item}")
        setattr(self, item, value)
        return value


if not hasattr(torch, "npu"):
    torch.npu = _DeviceModule("torch.npu")


from . import profiler  # noqa: E402,F401
