"""Mirrors ``torch_npu/profiler/scheduler.py`` (signature only; rlprof uses no schedule)."""

from enum import Enum


class ProfilerAction(Enum):
    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


class Schedule:
    def __init__(self, wait: int, active: int, warmup: int = 0, repeat: int = 0, skip_first: int = 0,
                 skip_first_wait: int = 0) -> None:
        self.wait, self.active, self.warmup, self.repeat = wait, active, warmup, repeat
        self.skip_first, self.skip_first_wait = skip_first, skip_first_wait

    def __call__(self, step: int) -> ProfilerAction:
        return ProfilerAction.RECORD
