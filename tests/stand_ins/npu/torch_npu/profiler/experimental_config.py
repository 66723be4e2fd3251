"""Mirrors ``torch_npu/profiler/experimental_config.py`` (names, values, signature)."""

from typing import Optional, Union

from ._recorder import record


class ProfilerLevel:
    Level0 = "Level0"
    Level1 = "Level1"
    Level2 = "Level2"
    Level_none = "Level_none"


class AiCMetrics:
    PipeUtilization = "ACL_AICORE_PIPE_UTILIZATION"
    ArithmeticUtilization = "ACL_AICORE_ARITHMETIC_UTILIZATION"
    Memory = "ACL_AICORE_MEMORY_BANDWIDTH"
    MemoryL0 = "ACL_AICORE_L0B_AND_WIDTH"
    MemoryUB = "ACL_AICORE_MEMORY_UB"
    ResourceConflictRatio = "ACL_AICORE_RESOURCE_CONFLICT_RATIO"
    L2Cache = "ACL_AICORE_L2_CACHE"
    MemoryAccess = "ACL_AICORE_MEMORY_ACCESS"
    AiCoreNone = "ACL_AICORE_NONE"


class ExportType:
    Db = "db"
    Text = "text"


class HostSystem:
    CPU = "cpu"
    MEM = "mem"
    DISK = "disk"
    NETWORK = "network"
    OSRT = "osrt"
    NUMA = "numa"


def supported_profiler_level():
    return {ProfilerLevel.Level0, ProfilerLevel.Level1, ProfilerLevel.Level2, ProfilerLevel.Level_none}


def supported_ai_core_metrics():
    return {v for k, v in vars(AiCMetrics).items() if not k.startswith("_")}


def supported_export_type():
    return {ExportType.Db, ExportType.Text}


class _ExperimentalConfig:
    def __init__(
        self,
        profiler_level: int = ProfilerLevel.Level0,
        aic_metrics: int = AiCMetrics.PipeUtilization,
        l2_cache: bool = False,
        msprof_tx: bool = False,
        mstx: bool = False,
        data_simplification: bool = True,
        record_op_args: bool = False,
        op_attr: bool = False,
        gc_detect_threshold: Optional[float] = None,
        export_type: Union[str, list] = ExportType.Text,
        host_sys: Optional[list] = None,
        mstx_domain_include: Optional[list] = None,
        mstx_domain_exclude: Optional[list] = None,
        sys_io: bool = False,
        sys_interconnection: bool = False,
    ):
        self.kwargs = dict(
            profiler_level=profiler_level, aic_metrics=aic_metrics, l2_cache=l2_cache, msprof_tx=msprof_tx,
            mstx=mstx, data_simplification=data_simplification, record_op_args=record_op_args, op_attr=op_attr,
            gc_detect_threshold=gc_detect_threshold,
            export_type=[export_type] if isinstance(export_type, str) else list(export_type),
            host_sys=host_sys, mstx_domain_include=mstx_domain_include, mstx_domain_exclude=mstx_domain_exclude,
            sys_io=sys_io, sys_interconnection=sys_interconnection,
        )
        record("_ExperimentalConfig", **self.kwargs)
