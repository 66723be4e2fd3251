"""A rollout step's tail (``metrics/tail.py``), from the iterations the step metrics time.

The iterations here are what an engine's batches do in a rollout: every request at once, the short ones
ending, a long one running on alone. The tail is asserted against what the iterations themselves say (the
time only the long request ran), the curve against the batches, and the memory against a step of a million
iterations.
"""

from __future__ import annotations

from rlprof_plugins.metrics.record import StepRecord
from rlprof_plugins.metrics.tail import KEPT, POINTS, StepTail, TailRecord
from rlprof_plugins.metrics.timer import StepMetrics
from rlprof_plugins.stages import IterationInfo

MS = 1_000_000


def run(tail: StepTail, batches: list[int], ms: int = 10, tokens_each: int = 1) -> int:
    """Iterations back to back, ``ms`` each; the end of the last."""
    t = 0
    for batch in batches:
        tail.add(t, t + ms * MS, batch, batch * tokens_each)
        t += ms * MS
    return t


def test_one_response_ten_times_longer_is_the_tail():
    """Eight requests: seven end after 20 iterations, one runs 200. The tail is the 180 iterations only it ran,
    their time and tokens; the curve is full for the first tenth and one request after."""
    tail = StepTail()
    run(tail, [8] * 20 + [1] * 180)
    r = tail.record()
    assert (r.peak_batch, r.tail_iterations, r.tail_tokens) == (8, 180, 180)
    assert r.tail_ms == 180 * 10 and r.span_ms == 200 * 10
    assert r.tail_share == 0.9
    assert r.occupancy == [8, 8] + [1] * (POINTS - 2)


def test_the_tail_starts_after_the_last_iteration_at_half_the_peak():
    """A batch that dips below half and fills again (a second wave of requests) is no tail; the tail starts
    where it fell below half for good. Half the peak itself is not yet the tail."""
    tail = StepTail()
    run(tail, [8] * 10 + [2] * 10 + [6] * 10 + [4] * 5 + [3] * 7 + [1] * 3)
    r = tail.record()
    assert r.peak_batch == 8 and r.tail_iterations == 10 and r.tail_ms == 100 and r.tail_tokens == 7 * 3 + 3


def test_a_step_with_no_tail_and_one_with_none_at_all():
    full = StepTail()
    run(full, [4] * 30)
    r = full.record()
    assert (r.tail_ms, r.tail_iterations, r.occupancy) == (0, 0, [4] * POINTS)
    assert StepTail().record() is None


def test_memory_is_bounded_however_long_the_step():
    """A million iterations keep at most 2 * KEPT for the curve, one entry per batch size, and the curve still
    follows the batches (a batch that falls linearly over the step)."""
    tail = StepTail()
    n = 1_000_000
    t = 0
    for i in range(n):
        batch = 256 - (256 * i) // n
        tail.add(t, t + MS, batch, batch)
        t += MS
    assert len(tail.kept) < 2 * KEPT and len(tail.last_of_batch) == 256
    r = tail.record()
    expected = [256 - int(256 * (k + 0.5) / POINTS) for k in range(POINTS)]
    assert all(abs(a - b) <= 4 for a, b in zip(r.occupancy, expected)), (r.occupancy, expected)  # a stride apart at most
    # the tail: after the last iteration whose batch is at least half of 256, each iteration 1 ms
    last_full = max(i for i in range(n // 2, n) if 256 - (256 * i) // n >= 128)
    assert r.tail_ms == n - (last_full + 1) and r.peak_batch == 256


def test_the_step_record_carries_the_tail_through_the_log():
    """The timer hands it over with the step; a line of the step log reads back the same; a record without one
    (an older line) reads back with none."""
    records: list[StepRecord] = []
    clock = iter(range(0, 10**12, 5 * MS))
    metrics = StepMetrics("rank0", records.append, clock=lambda: next(clock), wall=lambda: 1000.0)
    metrics.set_step(3, "request")
    for batch in [4, 4, 4, 1, 1]:
        metrics.begin()
        metrics.end(IterationInfo(0, batch, batch))
    metrics.set_step(4, "request")
    (record,) = records
    assert record.tail is not None and (record.tail.peak_batch, record.tail.tail_iterations) == (4, 2)
    assert StepRecord.decode(record.encode()).tail == record.tail
    old = record.to_json()
    del old["tail"]
    assert StepRecord.from_json(old).tail is None
    assert TailRecord.from_json({"peak_batch": "x"}) is None
