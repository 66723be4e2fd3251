"""GPU-shaped rank traces of any size, made from a real published GPU trace's own events.

The input of ``bench_report.py --gpu-mix``: the events of a rank of a real
NCCL job recorded on an A100 (``tests/fixtures/gpu-published/rank3-of-8``:
HolisticTraceAnalysis's test data, MIT; 4 device streams, NCCL kernels,
``ProfilerStep#N`` iterations), repeated end to end until the file is as large
as asked. Copy ``k`` is shifted by ``k`` times the trace's span in time and
by ``k`` times its largest id in its correlation and external ids, and its
``ProfilerStep#N`` are renumbered, so every iteration, launch and kernel
stays distinct and in order; the event mix (kinds, names, sizes, streams)
is the real one's. Written as plain JSON (``.pt.trace.json``) with the
rank's own ``distributedInfo``.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "gpu-published" / "rank3-of-8"
STEP = re.compile(r"^ProfilerStep#(\d+)$")
ID_ARGS = ("correlation", "External id")


def write_rank(path: Path, rank: int, world: int, megabytes: float, source: Path = SOURCE) -> int:
    """``path``: a rank trace of about ``megabytes`` MB; returns the copies of the source written."""
    trace = json.loads(gzip.open(next(source.glob("*.json.gz"))).read())
    events = [e for e in trace["traceEvents"] if e.get("ph") != "M" or e.get("name") != "process_labels"]
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed) + 1000.0
    top_id = max((int(e["args"][k]) for e in events for k in ID_ARGS
                  if isinstance(e.get("args"), dict) and isinstance(e["args"].get(k), int)), default=0) + 1
    steps = [int(m[1]) for e in events if (m := STEP.match(str(e.get("name", ""))))]
    n_steps = max(steps) - min(steps) + 1 if steps else 0
    header = {k: v for k, v in trace.items() if k != "traceEvents"}
    header["distributedInfo"] = {**trace.get("distributedInfo", {}), "rank": rank, "world_size": world}
    target = int(megabytes * 1e6)
    with path.open("w") as f:
        f.write("{\n" + "".join(f"  {json.dumps(k)}: {json.dumps(v)},\n" for k, v in header.items())
                + '  "traceEvents": [\n')
        written, copies, sep = 0, 0, ""
        while written < target:
            for e in events:
                e = dict(e)
                if copies and isinstance(e.get("ts"), (int, float)):
                    e["ts"] = e["ts"] + copies * span
                    args = e.get("args")
                    if isinstance(args, dict):
                        e["args"] = args = dict(args)
                        for k in ID_ARGS:
                            if isinstance(args.get(k), int):
                                args[k] += copies * top_id
                    m = STEP.match(str(e.get("name", "")))
                    if m:
                        e["name"] = f"ProfilerStep#{int(m[1]) + copies * n_steps}"
                    if e.get("ph") in ("s", "f") and isinstance(e.get("id"), int):
                        e["id"] += copies * top_id
                line = sep + json.dumps(e, separators=(",", ":"))
                f.write(line)
                written += len(line)
                sep = ",\n"
            copies += 1
        f.write("\n]}\n")
    return copies
