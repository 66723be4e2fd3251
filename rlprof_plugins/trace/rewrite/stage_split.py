"""Split one trace into per-stage traces using rlprof's iteration annotations.

Every event is given to the stage of the iteration it belongs to:

- the ``rlprof::iteration N [stage] ...`` ranges themselves;
- host events whose start lies inside an iteration range (any thread of the
  process that recorded it: the worker's own threads run that iteration);
- device events (kernels, memcpy) through their ``correlation`` id, to the
  stage of the host call that launched them, since they may run after the
  host range has closed;
- flow events (``ph`` s/t/f) through their id, to the stage of the flow's
  start.

The profiler's own pauses (``rlprof::profiler pause``) go to the stage of
the iteration before them (the chunk it ended is what the engine waited on).

Metadata events (``ph: M``) and the header keys go to every stage file.
Events outside every iteration (idle time between iterations) belong to no
stage and are dropped, so each stage file holds only its iterations' events
and each iteration appears in exactly one stage file.

The worker's exporter runs it in a child process (``split_in_subprocess``,
through ``rlprof_plugins._child``) so the JSON work never holds the engine's GIL.
"""

from __future__ import annotations

import bisect
from array import array
from pathlib import Path
from typing import Iterable

from ..format.pauses import PAUSE_NAME
from ...stages import ITERATION_PREFIX, ITERATION_RE, STAGES
from ..format import codec
from ..format.gz import file_size
from ..format.naming import TRACE_SUFFIX, is_device_event as _is_device
from ..._progress import Progress, Ticker
from ..format.reader import TraceReader
from ..format.writer import TraceWriter


def _flow_key(e: dict) -> tuple:
    return (e.get("id"), e.get("cat"), e.get("name"))


def _is_late(e: dict) -> bool:
    """Placed through another event (its launch, its flow's start), so only
    after every host event has been seen."""
    return _is_device(e) or e.get("ph") in ("f", "t")


class StageClassifier:
    """The rules above, fed in passes so a file never has to be in memory:
    ``add_iteration`` for every event, then ``host_stage`` for the host
    events (which also learns what they launched and the flows they start),
    then ``late_stage`` for device events and flow ends."""

    def __init__(self) -> None:
        self._iterations: list[tuple[float, float, str, object]] = []
        self._starts: list[float] = []
        self._by_correlation: dict[object, str] = {}
        self._by_flow: dict[tuple, str] = {}

    def add_iteration(self, e: dict) -> None:
        name = str(e.get("name", ""))
        if e.get("ph") != "X" or not name.startswith(ITERATION_PREFIX):  # the prefix first: cheap
            return
        m = ITERATION_RE.match(name)
        if m and m.group("stage"):
            start = float(e["ts"])
            self._iterations.append((start, start + float(e.get("dur", 0)), m.group("stage"), e.get("pid")))

    def ready(self) -> None:
        if not self._iterations:
            raise ValueError("no rlprof iteration annotations with a stage in this trace")
        self._iterations.sort(key=lambda it: it[:2])
        self._starts = [it[0] for it in self._iterations]

    def host_stage(self, e: dict) -> str | None:
        """Stage of a host event by time (None outside every iteration)."""
        ts = e.get("ts")
        if ts is None:
            return None
        ts = float(ts)
        pid = e.get("pid")
        if e.get("name") == PAUSE_NAME:  # the stage of the process's last iteration begun before it
            return next((it[2] for it in reversed(self._iterations[:bisect.bisect_right(self._starts, ts)])
                         if it[3] == pid), None)
        stage = None
        i = bisect.bisect_right(self._starts, ts) - 1
        while i >= 0:
            start, end, it_stage, it_pid = self._iterations[i]
            if ts > end:
                break
            if it_pid == pid:
                stage = it_stage
                break
            i -= 1
        # What it launched and the flow it starts follow it; outside every
        # iteration too (recorded as None), so their placement is known.
        args = e.get("args")
        corr = args.get("correlation") if args.__class__ is dict else None
        if corr is not None and (stage is not None or corr not in self._by_correlation):
            self._by_correlation[corr] = stage
        if e.get("ph") == "s":
            key = _flow_key(e)
            if stage is not None or key not in self._by_flow:
                self._by_flow[key] = stage
        return stage

    def late_stage(self, e: dict) -> str | None:
        if _is_device(e):
            return self._by_correlation.get((e.get("args") or {}).get("correlation"))
        return self._by_flow.get(_flow_key(e))

    def knows(self, e: dict) -> bool:
        """Whether a late event's host side has been seen (then ``late_stage`` is final)."""
        if _is_device(e):
            return (e.get("args") or {}).get("correlation") in self._by_correlation
        return _flow_key(e) in self._by_flow


def stage_of_events(events: list[dict]) -> list[str | None]:
    """The stage of each event (None: outside every iteration), in order."""
    c = StageClassifier()
    for e in events:
        c.add_iteration(e)
    c.ready()
    stages: list[str | None] = [None] * len(events)
    for k, e in enumerate(events):
        if e.get("ph") != "M" and not _is_late(e):
            stages[k] = c.host_stage(e)
    for k, e in enumerate(events):
        if _is_late(e):
            stages[k] = c.late_stage(e)
    return stages


def split(trace: dict, stages: Iterable[str] = STAGES) -> dict[str, dict]:
    """In-memory form of ``split_file`` (same rules)."""
    events = trace["traceEvents"]
    assigned = stage_of_events(events)
    header = {k: v for k, v in trace.items() if k != "traceEvents"}
    out = {s: {**header, "traceEvents": []} for s in stages}
    for e, stage in zip(events, assigned):
        if e.get("ph") == "M":
            for t in out.values():
                t["traceEvents"].append(e)
        elif stage in out:
            out[stage]["traceEvents"].append(e)
    for stage, t in out.items():
        t["rlprof_stage"] = stage
    return out


def stage_file_name(basename: str, stage: str, gzip: bool = True) -> str:
    """``rank0.<ns>`` -> ``rank0.<ns>.prefill.pt.trace.json.gz``."""
    return f"{basename}.{stage}{TRACE_SUFFIX}{'.gz' if gzip else ''}"


def stage_dir(out_dir: str | Path, stage: str) -> Path:
    """``out_dir`` with ``{stage}`` filled in (a step folder's stage folders), created."""
    path = Path(str(out_dir).replace("{stage}", stage))
    path.mkdir(parents=True, exist_ok=True)
    return path


def split_file(raw: Path, out_dir: str | Path, basename: str, gzip: bool = True,
               stages: Iterable[str] = STAGES, progress: Progress | None = None) -> list[tuple[str, Path]]:
    """Split ``raw`` into one file per stage in ``out_dir`` (``{stage}`` in it
    stands for the stage: one folder each), streaming.

    Reads of ``raw``: the iterations (only the fields they need); then every
    event, each written as soon as its stage is known; then, only if some
    device event or flow end came before its launch or flow start (Kineto
    writes device activity after the host's, so normally none), those.
    Never the whole file in memory. Output files appear under their final
    names only when all are complete; on any error none remain.
    """
    raw = Path(raw)
    classifier = StageClassifier()
    size = file_size(raw)
    ticker = Ticker(progress, "iterations", size)
    with TraceReader(raw) as reader, codec.gc_paused():
        header = dict(reader.header)
        for batch in reader.batches(_ITERATION_FIELDS):
            ticker.update(reader.bytes_read)
            for e in batch:
                classifier.add_iteration(e)
        header.update(reader.trailer)
    classifier.ready()
    stages = list(stages)
    writers = {s: TraceWriter(stage_dir(out_dir, s) / stage_file_name(basename, s, gzip), {**header, "rlprof_stage": s})
               for s in stages}
    try:
        deferred = _write_placed(raw, classifier, writers, Ticker(progress, "events", size))
        if deferred:
            _write_deferred(raw, classifier, writers, deferred)
    except BaseException:
        for w in writers.values():
            w.abort()
        raise
    return [(s, writers[s].close()) for s in stages]


_ITERATION_FIELDS = codec.fields_decoder("ph", "name", "ts", "dur", "pid")


def _write_placed(raw: Path, classifier: StageClassifier, writers: dict[str, TraceWriter], ticker: Ticker) -> array:
    """Every event whose stage is known when it is read; the indices of the rest."""
    deferred = array("Q")
    out = {s: [] for s in writers}
    kinds: dict[tuple, str] = {}  # (ph, cat) -> "meta" | "late" | "host": a few distinct pairs
    index = 0
    with TraceReader(raw) as reader, codec.gc_paused():
        for batch in reader.batches():
            ticker.update(reader.bytes_read)
            for e in batch:
                key = (e.get("ph"), e.get("cat"))
                try:
                    kind = kinds[key]
                except (KeyError, TypeError):  # new pair, or an unhashable (malformed) value
                    kind = "meta" if key[0] == "M" else "late" if _is_late(e) else "host"
                    if key[0].__class__ is str and (key[1] is None or key[1].__class__ is str):
                        kinds[key] = kind
                if kind == "host":
                    stage = classifier.host_stage(e)
                    if stage in out:
                        out[stage].append(e)
                elif kind == "late":
                    if classifier.knows(e):
                        stage = classifier.late_stage(e)
                        if stage in out:
                            out[stage].append(e)
                    else:
                        deferred.append(index)
                else:
                    for events in out.values():
                        events.append(e)
                index += 1
            for stage, events in out.items():
                writers[stage].write_batch(events)
                events.clear()
    return deferred


def _write_deferred(raw: Path, classifier: StageClassifier, writers: dict[str, TraceWriter], deferred: array) -> None:
    """The events at the ``deferred`` indices (ascending), now that every launch and flow start is known."""
    index, next_wanted = 0, 0
    with TraceReader(raw) as reader, codec.gc_paused():
        for batch in reader.batches():
            for e in batch:
                if next_wanted < len(deferred) and index == deferred[next_wanted]:
                    next_wanted += 1
                    stage = classifier.late_stage(e)
                    if stage in writers:
                        writers[stage].write(e)
                index += 1


def split_for_child(raw: str, out_dir: str, basename: str, gzip: bool = True) -> list[list[str]]:
    """``split_file`` with JSON arguments: what ``split_in_subprocess`` runs in the child."""
    return [[stage, str(path)] for stage, path in split_file(Path(raw), out_dir, basename, gzip=gzip)]


def split_in_subprocess(raw: Path, out_dir: str | Path, basename: str, gzip: bool = True) -> list[tuple[str, Path]]:
    """Run ``split_file`` in a child Python process; raises with the child's error on failure."""
    from ..._child import run_in_child, seconds_for

    written = run_in_child(f"{__name__}:split_for_child", raw, out_dir, basename, gzip, what="stage split",
                           timeout=seconds_for(raw))
    return [(stage, Path(path)) for stage, path in written]
