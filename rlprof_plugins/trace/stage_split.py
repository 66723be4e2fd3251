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

Metadata events (``ph: M``) and the header keys go to every stage file.
Events outside every iteration (idle time between iterations) belong to no
stage and are dropped, so each stage file holds only its iterations' events
and each iteration appears in exactly one stage file.

Run as a program by the worker's exporter (``python -m
rlprof_plugins.trace.stage_split RAW OUT_DIR BASENAME``) so the JSON work
happens in another process and never holds the engine's GIL.
"""

from __future__ import annotations

import bisect
import json
import sys
from pathlib import Path
from typing import Iterable

from ..stages import ITERATION_RE, STAGES
from . import io


def _iterations(events: list[dict]) -> list[tuple[float, float, str, object]]:
    found = []
    for e in events:
        if e.get("ph") != "X":
            continue
        m = ITERATION_RE.match(str(e.get("name", "")))
        if m and m.group("stage"):
            start = float(e["ts"])
            found.append((start, start + float(e.get("dur", 0)), m.group("stage"), e.get("pid")))
    found.sort()
    return found


def stage_of_events(events: list[dict]) -> list[str | None]:
    """The stage of each event (None: outside every iteration), in order."""
    iterations = _iterations(events)
    if not iterations:
        raise ValueError("no rlprof iteration annotations with a stage in this trace")
    starts = [it[0] for it in iterations]

    def by_time(e: dict) -> str | None:
        if "ts" not in e:
            return None
        ts = float(e["ts"])
        i = bisect.bisect_right(starts, ts) - 1
        while i >= 0:
            start, end, stage, pid = iterations[i]
            if ts > end:
                return None
            if pid == e.get("pid"):
                return stage
            i -= 1
        return None

    stages: list[str | None] = [None] * len(events)
    by_correlation: dict[object, str] = {}
    by_flow: dict[tuple, str] = {}
    # Pass 1: host events by time; remember what they launched and flows they start.
    for k, e in enumerate(events):
        if e.get("ph") in ("M", "f", "t") or _is_device(e):
            continue
        stage = by_time(e)
        stages[k] = stage
        if stage is None:
            continue
        corr = (e.get("args") or {}).get("correlation")
        if corr is not None:
            by_correlation[corr] = stage
        if e.get("ph") == "s":
            by_flow[_flow_key(e)] = stage
    # Pass 2: device events by correlation, flow ends by their start.
    for k, e in enumerate(events):
        if _is_device(e):
            stages[k] = by_correlation.get((e.get("args") or {}).get("correlation"))
        elif e.get("ph") in ("f", "t"):
            stages[k] = by_flow.get(_flow_key(e))
    return stages


def _is_device(e: dict) -> bool:
    cat = str(e.get("cat", "")).lower()
    return e.get("ph") == "X" and (cat in ("kernel", "gpu_memcpy", "gpu_memset") or cat.startswith("gpu_"))


def _flow_key(e: dict) -> tuple:
    return (e.get("id"), e.get("cat"), e.get("name"))


def split(trace: dict, stages: Iterable[str] = STAGES) -> dict[str, dict]:
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
    return f"{basename}.{stage}.pt.trace.json{'.gz' if gzip else ''}"


def split_file(raw: Path, out_dir: Path, basename: str, gzip: bool = True) -> list[tuple[str, Path]]:
    """Split ``raw`` into one file per stage in ``out_dir``; atomic writes."""
    parts = split(io.load(raw))
    return [(stage, io.save(t, out_dir / stage_file_name(basename, stage, gzip))) for stage, t in parts.items()]


def split_in_subprocess(raw: Path, out_dir: Path, basename: str, gzip: bool = True) -> list[tuple[str, Path]]:
    """Run ``split_file`` in a child Python process; raises on failure."""
    import subprocess

    cmd = [sys.executable, "-m", "rlprof_plugins.trace.stage_split", str(raw), str(out_dir), basename]
    if not gzip:
        cmd.append("--no-gzip")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"stage split failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return [(f["stage"], Path(f["path"])) for f in json.loads(proc.stdout.strip().splitlines()[-1])]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (3, 4):
        print("usage: python -m rlprof_plugins.trace.stage_split RAW OUT_DIR BASENAME [--no-gzip]", file=sys.stderr)
        return 2
    raw, out_dir, basename = Path(args[0]), Path(args[1]), args[2]
    try:
        written = split_file(raw, out_dir, basename, gzip="--no-gzip" not in args)
    except (OSError, ValueError) as e:
        print(f"stage_split: {raw}: {e}", file=sys.stderr)
        return 1
    print(json.dumps([{"stage": s, "path": str(p)} for s, p in written]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
