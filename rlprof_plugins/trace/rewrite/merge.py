"""Merge the rank traces of one step into one trace, streaming.

What a merged view needs that concatenating files gets wrong:

- **processes**: every source pid (OS pids for CPU, device ids for GPUs,
  which collide across ranks: device 0 everywhere) gets a new pid unique in
  the output, named ``<rank> [tp/pp position] <CPU|device>: <original>``
  and sorted by rank, then by its order in the source.
- **ids**: flow (``s``/``t``/``f``) and async (``b``/``n``/``e``) ids and the
  ``correlation`` / ``External id`` args are shifted by ``rank order *
  10**12``, so no arrow joins two ranks (viewers pair flows by id, not pid).
- **clocks**: Kineto writes ``ts`` relative to ``baseTimeNanoseconds``;
  inputs with different bases are moved onto the smallest one. Ranks
  recorded on different hosts (a server spanning nodes) are aligned on the
  ends of their first collectives instead of the hosts' wall clocks
  (``align``); the shifts and the residual skew are in ``rlprof_merge.clock``.
- **metadata**: each rank's ``deviceProperties`` and ``distributedInfo``
  are kept (in ``rlprof_merge.ranks``; device properties also concatenated
  at the top level, like SGLang's merger does).

The rules are applied in ``rename``. Memory does not grow with trace size:
a batch of events at a time is read, renamed and written (``reader``,
``writer``); only the pid map and counters are kept. Each rank is renamed on its own (its pids come from its own range,
its ids and clock shift are known before it is read), so ranks are merged in
parallel processes where there are cores and enough input: each writes its
part of the output's gzip stream, spliced in rank order (``gz``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ... import __version__
from ..format import codec
from .align import collective_ends_us, offsets
from ..format.clock import base_time_ns, first_ts_ns
from ..format.pauses import PAUSE_CAT, PAUSE_NAME, PAUSES_KEY
from ..format.gz import file_size
from ..._parallel import pool, processes_for
from ..._progress import Progress, Ticker, to_stderr
from ..format.reader import TraceReader
from .rename import ID_STRIDE, PID_STRIDE, RankRenamer, metadata_events, rename_batch
from ..format.rank_files import MergeGroup, RankFile
from ..format.writer import PartResult, PartWriter, TraceWriter


@dataclass
class RankStats:
    label: str
    source: str
    events: int = 0
    pids: dict[str, int] = field(default_factory=dict)  # source pid (as text) -> merged pid
    pauses: int = 0  # rlprof's own profiler pauses (``trace.format.pauses``), apart from engine time
    pause_us: float = 0.0


@dataclass
class MergeResult:
    output: Path
    events: int
    ranks: list[RankStats]
    seconds: float


def _absolute_base(rf: RankFile) -> int | None:
    first = first_ts_ns(rf.path)
    return None if first is None else first - first % 1_000_000_000


@dataclass
class _RankJob:
    """One rank's share of a merge: everything it needs, known before it is read."""

    rf: RankFile
    order: int
    shift_us: float
    absolute_base_ns: int | None
    report: bool = False  # progress lines on stderr (from a worker process)

    @property
    def first_pid(self) -> int:
        return 1 + self.order * PID_STRIDE


@dataclass
class _RankDone:
    stats: RankStats
    pids: list[int]
    trailer: dict
    part: PartResult | None = None


def _merge_rank(job: _RankJob, sink, progress: Progress | None) -> _RankDone:
    """Read, rename and write one rank's events (and then its process names) to ``sink``."""
    rank = RankRenamer(job.rf, job.order, job.shift_us, job.first_pid, job.absolute_base_ns)
    st = RankStats(job.rf.label, job.rf.path.name)
    ticker = Ticker(progress, job.rf.label, file_size(job.rf.path))
    with TraceReader(job.rf.path) as reader, codec.gc_paused():  # events hold no cycles
        for batch in reader.batches():
            st.events += len(batch)
            for e in batch:
                if e.get("name") == PAUSE_NAME and e.get("cat") == PAUSE_CAT:
                    st.pauses += 1
                    st.pause_us += float(e.get("dur") or 0)
            sink.write_batch(rename_batch(batch, rank))
            ticker.update(reader.bytes_read)
        sink.write_batch(metadata_events(rank, job.first_pid))
    if len(rank.pids) >= PID_STRIDE:
        raise ValueError(f"{job.rf.path}: {len(rank.pids)} processes in one rank; at most {PID_STRIDE - 1} merge")
    st.pids = {str(k): v for k, v in rank.pids.items()}
    return _RankDone(st, sorted(rank.pids.values()), reader.trailer)


def _merge_rank_part(job: _RankJob, part_path: Path, compresslevel: int) -> _RankDone:
    """``_merge_rank`` in a worker process, into a part file of the output's gzip stream."""
    part = PartWriter(part_path, compresslevel=compresslevel)
    try:
        done = _merge_rank(job, part, to_stderr if job.report else None)
    except BaseException:
        part.abort()
        raise
    done.part = part.close()
    return done


def merge_jobs(group: MergeGroup, output: Path) -> int:
    """Processes worth using (``parallel``); parts are gzip streams, so plain output uses one."""
    if output.suffix != ".gz":
        return 1
    return processes_for(len(group.inputs), sum(file_size(rf.path) for rf in group.inputs))


ALIGN = ("auto", "collectives", "clock")


def merge(group: MergeGroup, output: Path | None = None, *, progress: Progress | None = None,
          compresslevel: int = 3, jobs: int | None = None, align: str = "auto") -> MergeResult:
    """Write ``group``'s inputs as one trace (atomically) and return what was written.
    ``jobs``: processes to use (default: ``merge_jobs``). ``align``: ``clock``
    (each host's wall clock), ``collectives`` (a shared instant, ``align``), or
    ``auto``: collectives when the inputs come from more than one host. A
    failure leaves nothing behind (not even the ``merged/`` folder it made)."""
    if align not in ALIGN:
        raise ValueError(f"align: one of {', '.join(ALIGN)}, got {align!r}")
    if not group.inputs:
        raise ValueError(f"{group.directory}: no rank traces to merge")
    output = Path(output or group.output)
    created = not output.parent.exists()
    output.parent.mkdir(parents=True, exist_ok=True)
    try:
        processes = 1 if output.suffix != ".gz" else (jobs or merge_jobs(group, output))
        return _merge(group, output, progress, compresslevel, processes, align)
    except BaseException:
        if created:
            try:
                output.parent.rmdir()
            except OSError:
                pass
        raise


def _header(group: MergeGroup, readers: list[TraceReader], bases: list[int | None]) -> dict[str, Any]:
    known = [b for b in bases if b is not None]
    first = readers[0].header
    device_properties: list = []
    for rf, r in zip(group.inputs, readers):
        for d in r.header.get("deviceProperties") or []:
            device_properties.append({**d, "rlprof_rank": rf.label} if isinstance(d, dict) else d)
    header: dict[str, Any] = {"schemaVersion": first.get("schemaVersion", 1)}
    if "displayTimeUnit" in first:
        header["displayTimeUnit"] = first["displayTimeUnit"]
    if known:
        header["baseTimeNanoseconds"] = min(known)
    header["deviceProperties"] = device_properties
    dist = next((r.header["distributedInfo"] for r in readers if "distributedInfo" in r.header), None)
    if dist is not None:
        header["distributedInfo"] = dist
    return header


def _clock(group: MergeGroup, bases: list[int | None], align: str) -> tuple[list[float], dict[str, Any]]:
    """Per input, microseconds added on top of its base-time shift, and what the merge says about clocks."""
    extra = [0.0] * len(group.inputs)
    if align == "clock" or (align == "auto" and len(group.hosts) < 2):
        return extra, {"aligned_on": "wall clock", "hosts": sorted(group.hosts)}
    workers = [(k, rf) for k, rf in enumerate(group.inputs)
               if rf.role == "worker" and not rf.absolute_time and bases[k] is not None]
    found = offsets([(rf.label, collective_ends_us(rf.path, bases[k])) for k, rf in workers])
    if found is None:
        return extra, {"aligned_on": "wall clock", "hosts": sorted(group.hosts),
                       "note": "too few collectives recorded to align on"}
    by_host: dict[str | None, float] = {}
    for (k, rf), a in zip(workers, found):
        extra[k] = a.shift_us
        by_host.setdefault(rf.host, a.shift_us)
    for k, rf in enumerate(group.inputs):  # the API server's trace: its host's shift
        if rf.role != "worker":
            extra[k] = by_host.get(rf.host, 0.0)
    return extra, {"aligned_on": "collectives", "hosts": sorted(group.hosts),
                   "residual_skew_us": round(max(a.residual_us for a in found), 3),
                   "ranks": [{"label": a.label, "shift_us": round(a.shift_us, 3), "pairs": a.pairs,
                              "residual_us": round(a.residual_us, 3)} for a in found]}


def _merge(group: MergeGroup, output: Path, progress: Progress | None, compresslevel: int,
           jobs: int, align: str = "auto") -> MergeResult:
    t0 = time.perf_counter()
    # Every input's header first: they are needed before the first event is
    # written, and a missing/corrupt header fails before any output exists.
    readers = [TraceReader(rf.path) for rf in group.inputs]
    try:
        # torch_npu timelines count from the epoch: their base is their first
        # event's second, so a merged file keeps small, exact times.
        bases = [_absolute_base(rf) if rf.absolute_time else base_time_ns(r) for rf, r in zip(group.inputs, readers)]
        header = _header(group, readers, bases)
        headers = [r.header for r in readers]
    finally:
        for r in readers:
            r.close()
    base_out = header.get("baseTimeNanoseconds")
    extra, clock = _clock(group, bases, align)
    job_list = [_RankJob(rf, order, extra[order] + ((base - base_out) / 1000.0 if base is not None and base_out is not None
                                                    else 0.0),
                         (base_out or 0) if rf.absolute_time else None, report=progress is not None)
                for order, (rf, base) in enumerate(zip(group.inputs, bases))]
    if progress:
        total = sum(file_size(rf.path) for rf in group.inputs) / 1e6
        how = f"{jobs} processes" if jobs > 1 else "one process"
        progress(f"merging {len(job_list)} traces ({total:,.0f} MB) into {output} with {how}")
    with TraceWriter(output, header, compresslevel=compresslevel) as writer:
        done = _run_parallel(job_list, writer, output, compresslevel, jobs) if jobs > 1 else \
            [_merge_rank(job, writer, progress) for job in job_list]
        ranks_meta = []
        for job, d, h in zip(job_list, done, headers):
            rf = job.rf
            ranks_meta.append({
                "label": rf.label, "role": rf.role, "position": rf.position, "source": rf.path.name,
                "pids": d.pids, "id_offset": job.order * ID_STRIDE, "ts_shift_us": job.shift_us,
                PAUSES_KEY: {"count": d.stats.pauses, "ms": round(d.stats.pause_us / 1000.0, 3)},
                "baseTimeNanoseconds": bases[job.order],
                "distributedInfo": h.get("distributedInfo"),
                "deviceProperties": h.get("deviceProperties"),
                "header": {k: v for k, v in h.items()
                           if k not in ("deviceProperties", "distributedInfo", "baseTimeNanoseconds")},
                "trailer": d.trailer,
            })
        trailer = {"traceName": str(output.name),
                   "rlprof_merge": {"plugin_version": __version__, "stage": group.stage, "ranks": ranks_meta,
                                    "clock": clock, "missing": list(group.missing)}}
        written = writer.count
        writer.close(trailer)
    return MergeResult(output, written, [d.stats for d in done], time.perf_counter() - t0)


def _run_parallel(jobs: list[_RankJob], writer: TraceWriter, output: Path, compresslevel: int,
                  processes: int) -> list[_RankDone]:
    """Each rank in a worker process, its part spliced into ``writer`` in rank order as soon as it and the
    ranks before it are done."""
    parts = [output.parent / f".{output.name}.part{job.order}.{os.getpid()}.tmp" for job in jobs]
    done: list[_RankDone] = []
    try:
        with pool(processes) as workers:
            futures = [workers.submit(_merge_rank_part, job, part, compresslevel) for job, part in zip(jobs, parts)]
            try:
                for future in futures:
                    d = future.result()
                    writer.append_part(d.part)
                    d.part.path.unlink()
                    done.append(d)
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
    finally:
        for part in parts:
            part.unlink(missing_ok=True)
    return done
