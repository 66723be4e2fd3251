"""One rank's consecutive recordings (the chunks of one session) as one trace.

A chunked session (``chunk_iterations``) records a long window as several
torch sessions in a row, so each of torch's stops post-processes only one
chunk on the engine thread. This joins them back, streaming, into the trace
a single session would have written:

- **clocks**: each chunk has its own ``baseTimeNanoseconds``; every chunk is
  moved onto the first one's, so the timeline runs on without a jump;
- **processes**: the same OS process and the same devices recorded every
  chunk, so pids and tids stay as they are; the metadata events each chunk
  repeats (process and thread names, sort indexes) are written once;
- **ids**: flow, async and correlation ids and torch's Python ids restart or
  repeat across sessions; chunk ``k`` shifts them by ``k * ID_STRIDE``, so no
  arrow or call-stack link joins two chunks;
- **iterations**: the controller numbers ``rlprof::iteration`` ranges across
  chunks, so they run on unchanged;
- **pauses**: the stops between chunks and the last one, timed by the
  controller, become ``rlprof::profiler pause`` events (``pauses``);
- **the header**: the first chunk's, with the stack sampler's account of
  every chunk added together (``format.sampler_account``).

Memory stays flat (a batch of events at a time). The engine never runs
this: the exporter runs it in a child process (``stitch_in_subprocess``),
and ``rlprof stitch`` finishes a session whose stitching failed.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..._child import run_in_child, seconds_for
from ..format.clock import base_time_ns
from ..format.pauses import Pause, pauses_from_json
from ..format.reader import TraceReader
from ..format.sampler_account import SAMPLER_KEY, combined
from .rename import ID_ARGS, ID_STRIDE, shift_and_renumber
from ..format.writer import TraceWriter

PYTHON_ID_ARGS = ("Python id", "Python parent id")
CHUNK_KEY = "rlprof_chunks"  # in the stitched trace's header: one entry per chunk


@dataclass
class StitchResult:
    output: Path
    events: int
    chunks: int
    seconds: float


def _shifted(events: list[dict], shift_us: float, offset: int, seen_metadata: set) -> list[dict]:
    """A chunk's events on the first chunk's clock, ids apart (``rename.shift_and_renumber``),
    metadata already written by an earlier chunk left out."""
    out = []
    for event in events:
        if event.get("ph") == "M":
            key = (event.get("name"), event.get("pid"), event.get("tid"), json.dumps(event.get("args"), sort_keys=True))
            if key in seen_metadata:
                continue
            seen_metadata.add(key)
        out.append(event)
    shift_and_renumber(out, shift_us, offset, ID_ARGS + PYTHON_ID_ARGS)
    return out


def stitch(chunks: list[Path], output: Path, *, compresslevel: int = 3, pauses: list[Pause] | None = None
           ) -> StitchResult:
    """Write ``chunks`` (in recording order) as one trace at ``output`` (gzip
    when it ends in ``.gz``), atomically, with the profiler's ``pauses``
    between and after them (``trace.format.pauses``)."""
    if not chunks:
        raise ValueError("no chunks to stitch")
    t0 = time.perf_counter()
    readers = [TraceReader(path) for path in chunks]
    try:
        bases = [base_time_ns(r) for r in readers]
        first = bases[0]
        header = {k: v for k, v in readers[0].header.items()}
        if first is not None:
            header["baseTimeNanoseconds"] = first
        header[CHUNK_KEY] = [{"source": p.name, "baseTimeNanoseconds": b} for p, b in zip(chunks, bases)]
        sampler = combined([r.header.get(SAMPLER_KEY) for r in readers])
        if sampler is not None:
            header[SAMPLER_KEY] = sampler
        seen_metadata: set = set()
        trailer: dict[str, Any] = {}
        with TraceWriter(output, header, compresslevel=compresslevel) as writer:
            for k, (reader, base) in enumerate(zip(readers, bases)):
                shift = (base - first) / 1000.0 if base is not None and first is not None else 0.0
                for batch in reader.batches():
                    writer.write_batch(_shifted(batch, shift, k * ID_STRIDE, seen_metadata))
                trailer.update({key: v for key, v in reader.trailer.items() if key != "baseTimeNanoseconds"})
            writer.write_batch([p.event(first or 0) for p in pauses or []])
            writer.close(trailer)
            events = writer.count
    finally:
        for reader in readers:
            reader.close()
    return StitchResult(output, events, len(chunks), time.perf_counter() - t0)


def stitch_for_child(chunks: list[str], output: str, pauses: list[dict]) -> dict:
    """``stitch`` with JSON arguments: what ``stitch_in_subprocess`` runs in the child."""
    r = stitch([Path(c) for c in chunks], Path(output), pauses=pauses_from_json(pauses))
    return {"output": str(r.output), "events": r.events, "chunks": r.chunks}


def stitch_in_subprocess(chunks: list[Path], output: Path, pauses: list[Pause]) -> None:
    """``stitch`` in a child Python process (JSON work never holds an engine
    process's GIL); raises with the child's error on failure."""
    run_in_child(f"{__name__}:stitch_for_child", chunks, output, [p.to_json() for p in pauses],
                 what="stitching chunks", timeout=seconds_for(*chunks))
