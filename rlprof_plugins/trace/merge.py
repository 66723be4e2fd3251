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
  inputs with different bases are moved onto the smallest one.
- **metadata**: each rank's ``deviceProperties`` and ``distributedInfo``
  are kept (in ``rlprof_merge.ranks``; device properties also concatenated
  at the top level, like SGLang's merger does).

Memory does not grow with trace size: one event at a time is read, renamed
and written (``stream``); only the pid map and counters are kept.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .. import __version__
from .naming import DEVICE_CATS, DEVICE_WORDS
from .sources import MergeGroup, RankFile
from .stream import TraceReader, TraceWriter, base_time_ns, first_ts_ns, ts_ns

ID_STRIDE = 10**12
FLOW_PHASES = frozenset("stf")
ASYNC_PHASES = frozenset("bne")
ID_ARGS = ("correlation", "External id")
REPLACED_METADATA = frozenset({"process_name", "process_sort_index"})
PROGRESS_EVERY = 200_000

Progress = Callable[[str], None]


@dataclass
class RankStats:
    label: str
    source: str
    events: int = 0
    pids: dict[str, int] = field(default_factory=dict)  # source pid (as text) -> merged pid


@dataclass
class MergeResult:
    output: Path
    events: int
    ranks: list[RankStats]
    seconds: float


class _Rank:
    """Per-input renaming state."""

    def __init__(self, rf: RankFile, order: int, shift_us: float, first_pid: int,
                 absolute_base_ns: int | None = None) -> None:
        self.rf = rf
        # torch_npu timelines: absolute times, rewritten relative to the merged base
        self.absolute_base_ns = absolute_base_ns
        self.order = order
        self.id_offset = order * ID_STRIDE
        self.shift_us = shift_us
        self.next_pid = first_pid
        self.pids: dict[Any, int] = {}
        self.names: dict[int, str] = {}
        self.device: set[int] = set()

    def pid(self, source: Any) -> int:
        new = self.pids.get(source)
        if new is None:
            new = self.pids[source] = self.next_pid
            self.next_pid += 1
        return new

    def new_id(self, value: Any) -> Any:
        if isinstance(value, bool):
            return value
        if isinstance(value, int):
            return value + self.id_offset
        if isinstance(value, str):
            return f"{self.rf.label}:{value}" if self.order else value
        return value


def _process_label(rank: _Rank, source_pid: Any, new_pid: int) -> str:
    original = rank.names.get(new_pid)
    is_device = new_pid in rank.device or any(w in (original or "") for w in DEVICE_WORDS)
    if isinstance(source_pid, str) and not original:
        kind, what = "trace", source_pid or "markers"
    elif is_device:
        kind, what = "device", original or f"device {source_pid}"
    else:
        kind, what = "CPU", f"{original or 'process'} (pid {source_pid})"
    pos = " ".join(f"{k}{v}" for k, v in rank.rf.position.items())
    head = rank.rf.label + (f" [{pos}]" if pos else "")
    return f"{head} {kind}: {what}"


def _rename(event: dict, rank: _Rank) -> dict | None:
    ph = event.get("ph")
    if ph == "M" and event.get("name") in REPLACED_METADATA:
        if event.get("name") == "process_name":
            name = (event.get("args") or {}).get("name")
            rank.names[rank.pid(event.get("pid"))] = str(name) if name is not None else ""
        return None  # replaced by the merged names and order
    if "pid" in event:
        new_pid = rank.pid(event["pid"])
        event["pid"] = new_pid
        if event.get("cat") in DEVICE_CATS:
            rank.device.add(new_pid)
    if rank.absolute_base_ns is not None and "ts" in event:
        ns = ts_ns(event["ts"])
        if ns is not None:
            event["ts"] = (ns - rank.absolute_base_ns) / 1000.0
    elif rank.shift_us and isinstance(event.get("ts"), (int, float)):
        event["ts"] = event["ts"] + rank.shift_us
    if rank.order:
        if ph in FLOW_PHASES or ph in ASYNC_PHASES:
            for key in ("id", "bind_id", "id2"):
                if key in event:
                    event[key] = rank.new_id(event[key])
        args = event.get("args")
        if isinstance(args, dict):
            for key in ID_ARGS:
                if key in args:
                    args[key] = rank.new_id(args[key])
    if ph == "i" and event.get("s", "t") == "g":
        event["name"] = f"{rank.rf.label}: {event.get('name', '')}"
    return event


def _absolute_base(rf: RankFile) -> int | None:
    first = first_ts_ns(rf.path)
    return None if first is None else first - first % 1_000_000_000


def _metadata_events(rank: _Rank, sort_base: int) -> list[dict]:
    out = []
    for source_pid, new_pid in rank.pids.items():
        local = new_pid - sort_base
        out.append({"ph": "M", "name": "process_name", "pid": new_pid, "tid": 0,
                    "args": {"name": _process_label(rank, source_pid, new_pid)}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": new_pid, "tid": 0,
                    "args": {"sort_index": rank.order * 100_000 + local}})
    return out


def merge(group: MergeGroup, output: Path | None = None, *, progress: Progress | None = None,
          compresslevel: int = 3) -> MergeResult:
    """Write ``group``'s inputs as one trace (atomically) and return what was written.
    A failure leaves nothing behind (not even the ``merged/`` folder it made)."""
    if not group.inputs:
        raise ValueError(f"{group.directory}: no rank traces to merge")
    output = Path(output or group.output)
    created = not output.parent.exists()
    output.parent.mkdir(parents=True, exist_ok=True)
    try:
        return _merge(group, output, progress, compresslevel)
    except BaseException:
        if created:
            try:
                output.parent.rmdir()
            except OSError:
                pass
        raise


def _merge(group: MergeGroup, output: Path, progress: Progress | None, compresslevel: int) -> MergeResult:
    t0 = time.perf_counter()
    # Open every input once up front: headers (and base times) are needed
    # before the first event is written, and a missing/corrupt header fails
    # before any output exists.
    readers = [TraceReader(rf.path) for rf in group.inputs]
    try:
        # torch_npu timelines count from the epoch: their base is their first
        # event's second, so a merged file keeps small, exact times.
        bases = [_absolute_base(rf) if rf.absolute_time else base_time_ns(r) for rf, r in zip(group.inputs, readers)]
        known = [b for b in bases if b is not None]
        base_out = min(known) if known else None
        first = readers[0].header
        device_properties: list = []
        for rf, r in zip(group.inputs, readers):
            for d in r.header.get("deviceProperties") or []:
                device_properties.append({**d, "rlprof_rank": rf.label} if isinstance(d, dict) else d)
        header: dict[str, Any] = {"schemaVersion": first.get("schemaVersion", 1)}
        if "displayTimeUnit" in first:
            header["displayTimeUnit"] = first["displayTimeUnit"]
        if base_out is not None:
            header["baseTimeNanoseconds"] = base_out
        header["deviceProperties"] = device_properties
        dist = next((r.header["distributedInfo"] for r in readers if "distributedInfo" in r.header), None)
        if dist is not None:
            header["distributedInfo"] = dist
        ranks_meta = []
        stats = []
        next_pid = 1
        with TraceWriter(output, header, compresslevel=compresslevel) as writer:
            for order, (rf, reader, base) in enumerate(zip(group.inputs, readers, bases)):
                shift = (base - base_out) / 1000.0 if base is not None and base_out is not None else 0.0
                rank = _Rank(rf, order, shift, next_pid, (base_out or 0) if rf.absolute_time else None)
                st = RankStats(rf.label, rf.path.name)
                if progress:
                    progress(f"merging {rf.describe()} ({order + 1}/{len(group.inputs)}): {rf.path.name}")
                for event in reader.events():
                    renamed = _rename(event, rank)
                    if renamed is not None:
                        writer.write(renamed)
                    st.events += 1
                    if progress and st.events % PROGRESS_EVERY == 0:
                        progress(f"  {rf.label}: {st.events:,} events")
                for meta in _metadata_events(rank, next_pid):
                    writer.write(meta)
                next_pid = rank.next_pid
                st.pids = {str(k): v for k, v in rank.pids.items()}
                stats.append(st)
                ranks_meta.append({
                    "label": rf.label, "role": rf.role, "position": rf.position, "source": rf.path.name,
                    "pids": sorted(rank.pids.values()), "id_offset": rank.id_offset, "ts_shift_us": shift,
                    "baseTimeNanoseconds": base,
                    "distributedInfo": reader.header.get("distributedInfo"),
                    "deviceProperties": reader.header.get("deviceProperties"),
                    "header": {k: v for k, v in reader.header.items()
                               if k not in ("deviceProperties", "distributedInfo", "baseTimeNanoseconds")},
                    "trailer": reader.trailer,
                })
            trailer = {"traceName": str(output.name),
                       "rlprof_merge": {"plugin_version": __version__, "stage": group.stage, "ranks": ranks_meta}}
            written = writer.count
            writer.close(trailer)
    finally:
        for r in readers:
            r.close()
    return MergeResult(output, written, stats, time.perf_counter() - t0)


def merge_in_subprocess(directory: Path, timeout: float | None = None) -> list[Path]:
    """``rlprof merge DIR`` in a child process (the live ``merge`` option uses
    this so JSON work never holds an engine process's GIL)."""
    import json
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "rlprof_plugins.cli", "merge", str(directory), "--json", "--quiet"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"merge failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return [Path(m["output"]) for m in json.loads(proc.stdout)["merged"]]
