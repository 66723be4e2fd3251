"""Ranks recorded on different hosts, put on one timeline by a shared instant.

Each host's trace counts from that host's wall clock; across nodes those
disagree by milliseconds (NTP) or far more (no NTP), which scrambles a merged
view. Every rank of a tensor-parallel engine leaves a blocking collective
(all-reduce, all-gather: ``_C::shm_allreduce`` on CPU, ``ncclDevKernel_*`` on
GPUs, ``c10d::``/``gloo:`` ops) at the same instant: the last rank to arrive
releases them all. The ends of the first collectives the ranks recorded are
therefore a common instant the engine already runs, several times over.

``offsets`` pairs each rank's first collectives with the reference rank's (in
recording order, allowing a few unpaired at the start: a rank may have begun
recording a moment earlier), takes the median difference as that rank's clock
offset, and reports the residual skew: the median distance between paired
ends after the shift (robust to the odd collective one rank leaves late; the
alignment's typical error).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

from ..format.clock import ts_ns
from ..analysis.communication import is_communication
from ..format.reader import TraceReader

FIRST = 64  # collectives read per rank: enough pairs for a robust median, a small read
MAX_LAG = 3  # unpaired collectives tolerated at the start of one rank's recording
READ_LIMIT = 8 << 20  # bytes of the file read at most looking for them (a TP rank has them in its first KB)


@dataclass
class Alignment:
    """A rank's clock shift onto the reference rank's, and how well it fits."""

    label: str
    shift_us: float  # added to the rank's times
    pairs: int
    residual_us: float  # the median distance between paired ends after the shift


def collective_ends_us(path: Path, base_ns: int, limit: int = FIRST) -> list[tuple[str, float]]:
    """``(name, end)`` of the first ``limit`` collectives of a trace, in
    absolute microseconds (``base_ns``: its ``baseTimeNanoseconds``), in time order."""
    found: list[tuple[float, str, float]] = []
    with TraceReader(path) as reader:
        for batch in reader.batches():
            for e in batch:
                name = e.get("name")
                if e.get("ph") != "X" or not isinstance(name, str) or not is_communication(name):
                    continue
                start, dur = ts_ns(e.get("ts")), ts_ns(e.get("dur"))
                if start is None or dur is None:
                    continue
                found.append((start, name, (base_ns + start + dur) / 1000.0))
            if len(found) >= 4 * limit or reader.bytes_read > READ_LIMIT:
                break
    found.sort()
    return [(name, end) for _, name, end in found[:limit]]


def _fit(ref: list[tuple[str, float]], other: list[tuple[str, float]], lag: int) -> tuple[float, float, int] | None:
    """Median offset, residual and pair count pairing ``ref[i + lag]`` (or ``other[i - lag]``) with ``other[i]``."""
    pairs = [(r, o) for r, o in zip(ref[max(lag, 0):], other[max(-lag, 0):]) if r[0] == o[0]]
    if len(pairs) < 2:
        return None
    diffs = [r[1] - o[1] for r, o in pairs]
    shift = statistics.median(diffs)
    return shift, statistics.median(abs(d - shift) for d in diffs), len(pairs)


def offsets(ranks: list[tuple[str, list[tuple[str, float]]]]) -> list[Alignment] | None:
    """Each rank's shift onto the first rank's clock, from their collectives'
    ends; None when a rank recorded too few collectives to pair (then the
    merge keeps the wall clocks and says so)."""
    if len(ranks) < 2:
        return None
    ref_label, ref = ranks[0]
    out = [Alignment(ref_label, 0.0, len(ref), 0.0)]
    for label, ends in ranks[1:]:
        fits = [f for lag in range(-MAX_LAG, MAX_LAG + 1) if (f := _fit(ref, ends, lag)) is not None]
        if not fits:
            return None
        shift, residual, pairs = min(fits, key=lambda f: (f[1], -f[2]))
        out.append(Alignment(label, shift, pairs, residual))
    return out
