"""Device time split at the iterations' edges (``trace/analysis/device_time.py``): a rank's parts are its iterations'
sums, the time in no iteration is ``between_iterations``, and overlapping iterations count each kernel once.

Built from device items whose partition is worked out by hand below (microseconds), through the same
``DeviceWork`` the report feeds: launches by correlation id, items on several streams.
"""

from __future__ import annotations

import random

from rlprof_plugins.trace.analysis.device_time import DeviceWork

PARTS = ("compute", "exposed_communication", "exposed_memcpy", "idle")


def work(items: list[tuple[int, float, float, str, str]], launches: dict[int, float]) -> DeviceWork:
    """``items``: (correlation, start, end, category, name), given per stream in start order as a trace lists
    them; ``launches``: each correlation id's host launch time."""
    device = DeviceWork()
    for correlation, ts in sorted(launches.items()):
        device.launch(correlation, ts)
    for correlation, start, end, cat, name in items:
        device.item(correlation, cat, name, start, end - start)
    return device


def test_a_bursty_ranks_waiting_is_between_its_iterations_not_their_idle():
    """Two iterations 1 s apart (a rollout waiting for requests): each has 10 us of idle inside its window,
    the rank's idle is their sum, and the wait is ``between_iterations``."""
    items = [(1, 100, 150, "kernel", "gemm"), (2, 160, 200, "kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"),
             (3, 1_000_100, 1_000_150, "kernel", "gemm"), (4, 1_000_160, 1_000_200, "gpu_memcpy", "Memcpy DtoH")]
    whole, (first, second) = work(items, {1: 10, 2: 11, 3: 1_000_010, 4: 1_000_011}).partitions(
        [(0, 90), (1_000_000, 1_000_090)])
    assert first == {"window": 100, "compute": 50, "exposed_communication": 40, "exposed_memcpy": 0, "idle": 10,
                     "communication": 40, "memcpy": 0}
    assert second["window"] == 100 and second["idle"] == 10 and second["exposed_memcpy"] == 40
    assert whole["window"] == 1_000_100 and whole["idle"] == 20 and whole["between_iterations"] == 999_900
    assert sum(whole[k] for k in PARTS) + whole["between_iterations"] == whole["window"]


def test_overlapping_iterations_count_each_kernel_once_and_never_anothers_as_idle():
    """Asynchronous scheduling: iteration 2's kernels start on a second stream while iteration 1's run.
    Iteration 1: compute 0-100 and 150-200 (its window 0-200); iteration 2: compute 50-120, communication
    210-260 (its window 50-260). By hand: compute is 0-120 and 150-200 (170), 0-100 and 150-200 iteration
    1's (the earlier), 100-120 iteration 2's; 120-150 is idle inside both windows: the earlier's; 200-210
    is idle of iteration 2 only; 210-260 is iteration 2's exposed communication."""
    items = [(1, 0, 100, "kernel", "gemm"), (3, 150, 200, "kernel", "gemm"),  # stream 7
             (2, 50, 120, "kernel", "attention"),  # stream 8
             (4, 210, 260, "kernel", "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(...)")]
    whole, (first, second) = work(items, {1: 1, 3: 2, 2: 20, 4: 21}).partitions([(0, 10), (15, 30)])
    assert first == {"window": 180, "compute": 150, "exposed_communication": 0, "exposed_memcpy": 0, "idle": 30,
                     "communication": 0, "memcpy": 0}
    assert second == {"window": 80, "compute": 20, "exposed_communication": 50, "exposed_memcpy": 0, "idle": 10,
                      "communication": 50, "memcpy": 0}
    assert whole["compute"] == 170 and whole["idle"] == 40 and whole["between_iterations"] == 0
    assert whole["window"] == 260 == first["window"] + second["window"]


def test_any_timeline_is_partitioned_once():
    """Random timelines of several streams and iterations that may overlap: the rank's parts are its
    iterations' sums, they and ``between_iterations`` fill the window, and compute is the merged compute."""
    rng = random.Random(7)
    for _ in range(200):
        items, launches, windows, t = [], {}, [], 0.0
        correlation = 0
        for i in range(rng.randint(1, 6)):
            host = t
            windows.append((host, host + 5))
            for stream in range(rng.randint(1, 3)):
                start = host + rng.uniform(0, 80)
                for _ in range(rng.randint(1, 4)):
                    correlation += 1
                    end = start + rng.uniform(0, 40)
                    kind = rng.choice([("kernel", "gemm"), ("kernel", "ncclDevKernel_SendRecv"),
                                       ("gpu_memcpy", "Memcpy HtoD")])
                    items.append((correlation, start, end, *kind, stream))
                    launches[correlation] = host + rng.uniform(0, 5)
                    start = end + rng.uniform(0, 20)
            t += rng.uniform(6, 150)
        by_stream = sorted(items, key=lambda it: (it[5], it[1]))
        whole, mine = work([it[:5] for it in by_stream], launches).partitions(windows)
        assert abs(sum(whole[k] for k in PARTS) + whole["between_iterations"] - whole["window"]) < 1e-6
        for key in (*PARTS, "communication", "memcpy"):
            assert abs(whole[key] - sum(p[key] for p in mine if p)) < 1e-6, key
        spans = sorted((s, e) for _, s, e, cat, name, _ in items if cat == "kernel" and name == "gemm")
        merged, end = 0.0, float("-inf")
        for s, e in spans:
            if e > end:
                merged += e - max(s, end)
                end = e
        assert abs(whole["compute"] - merged) < 1e-6
