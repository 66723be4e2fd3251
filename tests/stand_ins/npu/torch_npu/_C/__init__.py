"""Stand-in for torch_npu's C extension: ``_profiler`` mirrors the real API;
every other name is import-only (see ``torch_npu._import_only``)."""

from torch_npu._import_only import module_getattr

__getattr__ = module_getattr("torch_npu._C")
