"""Read traces the way a user's viewer would: parse the file, count events."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

ITERATION = re.compile(
    r"^rlprof::iteration (\d+)"
    r"(?: \[(prefill|decode)\] prefill_tokens=(\d+) decode_tokens=(\d+) batch=(\d+))?$"
)


def load_trace(path: str | Path) -> dict:
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        data = json.load(f)
    return {"traceEvents": data} if isinstance(data, list) else data  # torch_npu's trace_view.json is an array


def iteration_indices(trace: dict) -> list[int]:
    """Indices of the rlprof iteration ranges recorded in a trace, sorted."""
    found = []
    for event in trace["traceEvents"]:
        m = ITERATION.match(str(event.get("name", "")))
        if m and event.get("ph") == "X":
            found.append(int(m.group(1)))
    return sorted(found)


def iteration_details(trace: dict) -> dict[int, tuple[str, int, int, int]]:
    """{index: (stage, prefill_tokens, decode_tokens, batch)} from the annotations."""
    out = {}
    for event in trace["traceEvents"]:
        m = ITERATION.match(str(event.get("name", "")))
        if m and event.get("ph") == "X" and m.group(2):
            out[int(m.group(1))] = (m.group(2), int(m.group(3)), int(m.group(4)), int(m.group(5)))
    return out


def iteration_stages(trace: dict) -> dict[int, str]:
    """{iteration index: stage} from the annotations of a trace."""
    return {index: d[0] for index, d in iteration_details(trace).items()}


def rank_folder(step_dir: str | Path, stage: str | None = None) -> Path:
    """Where a step folder keeps its worker traces: ``ranks/`` (or ``<stage>/``);
    a flat folder (no global step, or the old layout) is its own."""
    sub = Path(step_dir) / (stage or "ranks")
    return sub if sub.is_dir() else Path(step_dir)


def merged_file(step_dir: str | Path, stage: str | None = None) -> Path:
    """A step folder's merged trace (``merged/merged[.<stage>].pt.trace.json.gz``)."""
    return Path(step_dir) / "merged" / f"merged{'.' + stage if stage else ''}.pt.trace.json.gz"


def rank_traces(directory: str | Path) -> dict[str, Path]:
    """Worker traces in a folder, by rank name (``rank0`` ...); frontend and merged excluded."""
    out = {}
    for p in sorted(rank_folder(directory).glob("*.pt.trace.json*")):
        if ".async_llm." in p.name or p.name.startswith("merged."):
            continue
        m = re.search(r"(rank\d+)\.\d+\.pt\.trace\.json", p.name)
        if m is None and re.search(r"\.(prefill|decode)\.pt\.trace", p.name):
            continue  # stage traces: see stage_traces()
        assert m, f"unexpected trace name {p.name}"
        assert m.group(1) not in out, f"two traces for {m.group(1)} in {directory}"
        out[m.group(1)] = p
    return out


def manifest_traces(directory: str | Path, stage: str = "all") -> dict[str, Path]:
    """Worker traces of a step folder by rank, as its manifest lists them."""
    directory = Path(directory)
    data = json.loads((directory / "manifest.json").read_text())
    out = {}
    for f in data["files"]:
        if f.get("role") == "worker" and f.get("kind", "trace") == "trace" and f.get("stage", "all") == stage:
            assert f["rank"] not in out, f"two {stage} traces for {f['rank']} in {directory}"
            out[f["rank"]] = directory / f["path"]
    return dict(sorted(out.items()))


def ops_in_iterations(trace: dict) -> "dict[int, dict[str, int]]":
    """Per recorded iteration: the cpu_op names on its thread and how often each
    ran (what a chunked and a plain session over the same traffic agree on)."""
    events = trace["traceEvents"]
    ranges = sorted((e["ts"], e["ts"] + e["dur"], e.get("tid"), int(m.group(1))) for e in events
                    if e.get("ph") == "X" and (m := re.match(r"rlprof::iteration (\d+)", str(e.get("name", "")))))
    out: dict[int, dict[str, int]] = {index: {} for *_, index in ranges}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "cpu_op":
            for start, end, tid, index in ranges:
                if tid == e.get("tid") and start <= e["ts"] <= end:
                    out[index][e["name"]] = out[index].get(e["name"], 0) + 1
                    break
    return out


def python_frames(trace: dict) -> int:
    """Python stack events (``with_stack``)."""
    return sum(1 for e in trace["traceEvents"] if e.get("cat") == "python_function")


def profiler_steps(trace: dict) -> list[int]:
    """The ``ProfilerStep#N`` ranges of a trace (what HolisticTraceAnalysis reads), sorted."""
    return sorted(int(m.group(1)) for e in trace["traceEvents"]
                  if e.get("ph") == "X" and (m := re.match(r"ProfilerStep\s*#\s*(\d+)$", str(e.get("name", "")))))


def pause_events(trace: dict) -> list[dict]:
    """rlprof's own profiler pauses (``rlprof::profiler pause``), in time order."""
    return sorted((e for e in trace["traceEvents"] if e.get("name") == "rlprof::profiler pause" and e.get("ph") == "X"),
                  key=lambda e: e["ts"])


def written_traces(folder: Path, before: set[Path], timeout: float = 900, poll: float = 0.5) -> list[Path]:
    """Trace files that appeared under ``folder`` since ``before`` and stopped growing (a native stop may
    answer before its files exist); not rlprof's chunks, manifests, pause records, step logs or dumps."""
    import time

    deadline, sizes = time.time() + timeout, None
    while time.time() < deadline:
        files = sorted(p for p in Path(folder).rglob("*.json*") if p not in before
                       and not {".rlprof-chunks", "steps", "flight"} & set(p.parts)
                       and "manifest" not in p.name and "pauses" not in p.name)
        now = [p.stat().st_size for p in files]
        if files and now == sizes:
            return files
        sizes = now
        time.sleep(poll)
    return []
