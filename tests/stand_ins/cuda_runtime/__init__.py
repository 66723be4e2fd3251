"""A stand-in for torch's CUDA runtime binding (``torch.cuda.cudart()``) on hosts without CUDA.

The cuda backend (``rlprof_plugins/backends/cuda_profiler.py``) makes two
calls on it, as torch's own ``torch.cuda.profiler.start()``/``stop()`` do:
``cudaProfilerStart()`` and ``cudaProfilerStop()``, each returning a
``cudaError_t`` (0: success). This records each call with its time, whether
a capture range was already open (CUDA allows nesting neither), and fails
the next call with ``fail_next`` (an error code) so tests can check what a
failing capture does. ``tests/unit/test_cuda_backend.py`` checks that torch's
profiler module calls the binding by these names. Not verified here: the
real runtime's behaviour under nsys (docs/nsys.md says what is verified).
"""

from __future__ import annotations

import time


class StandInCudaRuntime:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []  # (name, time_ns)
        self.capturing = False
        self.nested = 0  # starts while capturing, stops while not: each a misuse
        self.fail_next = 0

    def _result(self) -> int:
        code, self.fail_next = self.fail_next, 0
        return code

    def cudaProfilerStart(self) -> int:  # noqa: N802 (the runtime's name)
        code = self._result()
        self.calls.append(("cudaProfilerStart", time.time_ns()))
        if code:
            return code
        self.nested += self.capturing
        self.capturing = True
        return 0

    def cudaProfilerStop(self) -> int:  # noqa: N802
        code = self._result()
        self.calls.append(("cudaProfilerStop", time.time_ns()))
        if code:
            return code
        self.nested += not self.capturing
        self.capturing = False
        return 0
