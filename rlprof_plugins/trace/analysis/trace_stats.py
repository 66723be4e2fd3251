"""One streaming pass over a rank's trace: its iterations, its operators, and which iteration each ran in.

For each trace (one rank, one stage or the whole session) the pass collects:

- the engine iterations (``iteration_names``: rlprof's ranges, else the
  engine's own annotations, else ``ProfilerStep#N``), each with its stage
  (``step_numbers.stage_label``), start and duration;
- the device time of the recorded iterations as a partition (compute,
  exposed communication, exposed memcpy, idle: ``device_time``), for the
  rank and for each iteration;
- device kernels / memcpys by total time, and CPU operators (``cpu_op``) by
  *self* time (their time minus their nested operators', per thread), so
  nested ops are not counted twice; and the same per stage: a CPU operator
  counts for the iteration it started in (outside every iteration:
  ``step_numbers.BETWEEN``), a kernel for the last iteration started before
  it (kernels run behind the CPU that launched them);
- rlprof's own profiler pauses (``rlprof::profiler pause``), apart.

Attributing operators needs the iterations, which a trace may list after
them, so each operator's start, self time and name are kept in flat arrays
for the pass (20 bytes an operator, a chunk at a time: ``spill``) and
placed at its end. A trace
that cannot be read gives its ``error``, not an exception: the step keeps
its other ranks.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, NamedTuple, Protocol

from ..format import codec
from ..format.clock import ts_ns
from ..format.gz import file_size
from .iteration_names import SOURCES, iteration_of
from ..format.naming import DEVICE_WORK_CATS, KINETO_2021_CATS
from ..._parallel import pool, processes_for
from ..format.pauses import PAUSE_CAT, PAUSE_NAME
from ..._progress import Ticker, to_stderr
from .python_stacks import PYTHON_CATS, PythonFrames
from ..format.reader import TraceReader
from .spill import SpilledColumns
from .step_numbers import BETWEEN, stage_label
from .device_time import LAUNCH_CATS, DeviceWork
from .time_split import SelfTimes

CPU_OP_CATS = frozenset({"cpu_op"})
# torch records annotations as user annotations; torch_npu as framework ops.
ITERATION_CATS = frozenset({"user_annotation", "cpu_op"})  # not gpu_user_annotation: the same range on a stream


@dataclass
class TraceStats:
    rank: str
    stage: str | None
    path: Path
    busy_us: float = 0.0  # summed iteration durations
    first_us: float | None = None
    last_us: float | None = None
    device_ops: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    cpu_self: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    # {stage or BETWEEN: {"device": {name: us}, "cpu": {name: us}}}: the operators of each stage's iterations
    stage_ops: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    events: int = 0
    cpu_out_of_order: int = 0  # operators counted without nesting (see time_split.SelfTimes)
    pauses: int = 0  # rlprof's own profiler pauses (``trace.format.pauses``): not engine time
    pause_us: float = 0.0
    # each iteration: (key, stage label, duration us, prefill tokens, decode tokens, batch), in start order
    iteration_list: list[tuple] = field(default_factory=list)
    source: str | None = None  # which names its iterations were read from (iteration_names.SOURCES)
    # the device time of its recorded iterations, split (``device_time.partition``, us; None: no device work),
    # and each iteration's, in the order of ``iteration_list``
    device: dict[str, float] | None = None
    iteration_device: list[dict[str, float] | None] = field(default_factory=list)
    # the Python frames of the iterations' threads per stage (``python_stacks``): self, total, call tree
    python: dict[str, dict] = field(default_factory=dict)
    python_stacks: str | None = None  # "exact" (torch's events), "sampled" (rlprof's) or None
    error: str | None = None  # the trace could not be read: why

    @property
    def iterations(self) -> int:
        return len(self.iteration_list)

    @property
    def span_us(self) -> float:
        return (self.last_us - self.first_us) if self.first_us is not None and self.last_us is not None else 0.0


class _Placed:
    """Operators kept for the pass: start, time and name id each (20 bytes an operator), a chunk at a time
    (``spill``): a trace of millions of operators holds one chunk."""

    def __init__(self) -> None:
        self.kept = SpilledColumns("d", "d", "i")
        self.starts, self.us, self.names = self.kept.columns
        self._ids: dict[str, int] = {}
        self.by_id: list[str] = []

    def add(self, name: str, start: float, us: float) -> None:
        i = self._ids.get(name)
        if i is None:
            i = self._ids[name] = len(self.by_id)
            self.by_id.append(name)
        self.starts.append(start)
        self.us.append(us)
        self.names.append(i)
        if len(self.names) >= self.kept.chunk:  # called per operator: the check here, not a call
            self.kept.added()


_FIELDS = codec.fields_decoder("ph", "ts", "dur", "cat", "name", "pid", "tid", args=("correlation", "sampled_us", "depth"))


def trace_stats(path: Path, rank: str, stage: str | None, report: bool = False) -> TraceStats:
    """One trace's numbers; ``report``: a progress line on stderr each second; ``error`` set if unreadable."""
    st = TraceStats(rank, stage, path)
    try:
        _read(st, report)
    except Exception as e:  # a truncated or corrupt file: named in the step's row, the other ranks kept
        fresh = TraceStats(rank, stage, path)
        fresh.error = f"{path.name}: {type(e).__name__}: {e}"
        return fresh
    return st


def _read(st: TraceStats, report: bool) -> None:
    ticker = Ticker(to_stderr if report else None, f"{st.rank} {st.path.name}", file_size(st.path))
    cpu_placed, device_placed = _Placed(), _Placed()
    cpu = SelfTimes(st.cpu_self, cpu_placed.add)
    device, device_ops = DeviceWork(), st.device_ops
    found: dict[str, list[tuple]] = defaultdict(list)  # source -> [(start, dur, Named)]
    threads: dict[str, set] = defaultdict(set)  # source -> the (pid, tid) its iterations ran on
    python = PythonFrames()
    first = last = None
    with TraceReader(st.path) as reader, codec.gc_paused():
        for batch in reader.batches(_FIELDS):
            ticker.update(reader.bytes_read)
            st.events += len(batch)
            for ph, ts, dur, cat, name, pid, tid, args in _fields_of(batch):
                if ph != "X":
                    continue
                if dur is None:
                    dur = 0
                if ts.__class__ is str:  # torch_npu's absolute microseconds
                    ns = ts_ns(ts)
                    ts = None if ns is None else ns / 1000.0
                if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)):
                    continue
                end = ts + dur
                if first is None or ts < first:
                    first = ts
                if last is None or end > last:
                    last = end
                name = "" if name is None else str(name)
                if cat.__class__ is str and cat in KINETO_2021_CATS:
                    cat = KINETO_2021_CATS[cat]
                if cat in DEVICE_WORK_CATS:
                    device_ops[name] += dur
                    device.item(_correlation(args), cat, name, ts, dur)
                    device_placed.add(name, ts, dur)
                    continue
                if cat in LAUNCH_CATS:
                    device.launch(_correlation(args), ts)
                    continue
                if name == PAUSE_NAME and cat == PAUSE_CAT:
                    st.pauses += 1
                    st.pause_us += dur
                elif cat in ITERATION_CATS and (named := iteration_of(name)) is not None:
                    found[named.source].append((ts, dur, named))
                    threads[named.source].add((pid, tid))
                elif cat in CPU_OP_CATS:
                    cpu.add((pid, tid), ts, end, name)
                elif cat in PYTHON_CATS:
                    python.add(cat, (pid, tid), ts, end, name, *_sampled(args))
    cpu.close()
    st.first_us, st.last_us = first, last
    st.cpu_out_of_order = cpu.out_of_order
    source = next((s for s in SOURCES if found.get(s)), None)
    windows = sorted(found[source], key=lambda item: item[0]) if source else []
    st.source = source
    for ordinal, (ts, dur, named) in enumerate(windows):
        # numbered iterations are the same number on every rank; the engines' own count from the trace's start
        key = ("", named.index) if named.index is not None else (st.stage or "", ordinal)
        st.iteration_list.append((key, stage_label(named.stage, st.stage), dur, named.prefill_tokens,
                                  named.decode_tokens, named.batch))
        st.busy_us += dur
    st.python_stacks = python.mode
    st.python = python.by_stage([(ts, ts + dur, item[1]) for (ts, dur, _), item in zip(windows, st.iteration_list)],
                                threads.get(source, set()) if source else set())
    _place(st, windows, cpu_placed, "cpu", inside_only=True)
    _place(st, windows, device_placed, "device", inside_only=False)
    _split_device(st, windows, device)


def _fields_of(batch: list) -> list[tuple]:
    """Each event's (ph, ts, dur, cat, name, pid, tid, args): read as attributes from msgspec's light items
    (a method call per field would cost a third of the pass), from the dicts of the ``json`` fallback."""
    if batch and batch[0].__class__ is not dict:
        return [(e.ph, e.ts, e.dur, e.cat, e.name, e.pid, e.tid, e.args) for e in batch]
    return [(e.get("ph"), e.get("ts"), e.get("dur"), e.get("cat"), e.get("name"), e.get("pid"), e.get("tid"),
             e.get("args")) for e in batch]


def _sampled(args: object) -> tuple[float, int]:
    """A sampled Python span's time by its samples and its depth (``backends.stack_sampler``); -1, -1: an
    exact event."""
    if args is None or not hasattr(args, "get"):
        return -1.0, -1
    us, depth = args.get("sampled_us"), args.get("depth")
    if not isinstance(us, (int, float)) or not isinstance(depth, int) or isinstance(depth, bool):
        return -1.0, -1
    return float(us), depth


def _correlation(args: object) -> object:
    """An event's correlation id: from its ``args`` object (msgspec's light item or a dict); None where
    ``args`` is absent or not an object (a malformed event costs its kernel's iteration, not the trace)."""
    return args.get("correlation") if args is not None and hasattr(args, "get") else None


def _split_device(st: TraceStats, windows: list[tuple], device: DeviceWork) -> None:
    """The device time of the recorded iterations, for the trace and each iteration (without iterations:
    the whole device timeline, one window)."""
    st.device, parts = device.partitions([(ts, ts + dur) for ts, dur, _ in windows])
    st.iteration_device = parts if windows else []


def _place(st: TraceStats, windows: list[tuple], placed: _Placed, kind: str, inside_only: bool) -> None:
    """Each operator to the stage of its iteration: the one it started in (CPU) or the last started (device)."""
    starts = [w[0] for w in windows]
    ends = [w[0] + w[1] for w in windows]
    labels = [item[1] for item in st.iteration_list]
    totals: dict[tuple[str, int], float] = defaultdict(float)
    for start, us, name in placed.kept.rows():
        i = bisect_right(starts, start) - 1
        where = BETWEEN if i < 0 or (inside_only and start >= ends[i]) else labels[i]
        totals[where, name] += us
    for (where, name), us in totals.items():
        bucket = st.stage_ops.setdefault(where, {"device": {}, "cpu": {}})[kind]
        bucket[placed.by_id[name]] = us


class TraceJob(NamedTuple):
    """One trace's pass as a step asks for it: the file, the rank it records, the stage it holds."""

    path: Path
    rank: str
    stage: str | None


class TracePasses(Protocol):
    """Whatever runs a step's trace passes and answers each job's ``TraceStats``, in order: this machine
    (``passes_here``), or the passes a report ran beforehand where the traces lie (``report.execute.passes``)."""

    def __call__(self, jobs: list[TraceJob], progress: Callable[[str], None] | None) -> list[TraceStats]: ...


def step_jobs(groups: list) -> list[tuple[int, TraceJob]]:
    """The pass of each worker trace of a step's merge groups (``rank_files.MergeGroup``), with its group."""
    return [(g_index, TraceJob(rf.path, rf.label, g.stage)) for g_index, g in enumerate(groups)
            for rf in g.inputs if rf.role == "worker"]


def stats_of(groups: list, passes: TracePasses, progress: Callable[[str], None] | None) -> list[list[TraceStats]]:
    """``trace_stats`` of every worker trace of a step, per group, as ``passes`` answers them."""
    jobs = step_jobs(groups)
    stats = passes([job for _, job in jobs], progress)
    out: list[list[TraceStats]] = [[] for _ in groups]
    for (g_index, _), st in zip(jobs, stats):
        out[g_index].append(st)
    return out


def passes_here(jobs: list[TraceJob], progress: Callable[[str], None] | None) -> list[TraceStats]:
    """``trace_stats`` of each (path, rank, stage) on this machine: in processes (one per trace, up to the
    cores) when the step is large."""
    processes = processes_for(len(jobs), sum(file_size(path) for path, _, _ in jobs))
    report = progress is not None
    if report and jobs:
        progress(f"reading {len(jobs)} traces ({sum(file_size(j[0]) for j in jobs) / 1e6:,.0f} MB) with "
                 + (f"{processes} processes" if processes > 1 else "one process"))
    if processes > 1:
        with pool(processes) as workers:
            return list(workers.map(trace_stats, *zip(*[(path, label, stage, report)
                                                        for path, label, stage in jobs])))
    return [trace_stats(path, label, stage, report) for path, label, stage in jobs]
