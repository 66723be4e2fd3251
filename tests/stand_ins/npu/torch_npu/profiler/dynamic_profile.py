"""``torch_npu.profiler.dynamic_profile``: vllm-ascend's worker imports it (msMonitor)."""


def init(path: str) -> None:
    pass


def step() -> None:
    pass
