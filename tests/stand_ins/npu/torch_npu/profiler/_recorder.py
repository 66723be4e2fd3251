"""Every call into the stand-in, in order: (function, keyword arguments).

Tests in the same process read ``CALLS``; each ``*_ascend_pt`` directory the
stand-in writes also holds ``standin_calls.json`` with the calls of its own
recording, for tests that run the engine in other processes.
"""

CALLS: list = []


def record(name: str, **kwargs) -> None:
    CALLS.append((name, kwargs))
