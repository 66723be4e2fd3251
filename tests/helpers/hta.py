"""HolisticTraceAnalysis, the analysis tool users already have, opening what we write.

It runs in its own environment (.venv-hta: its pins differ from the engines'),
so each question is a child process that prints one JSON line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

HTA_PYTHON = Path(__file__).resolve().parents[2] / ".venv-hta" / "bin" / "python"

_PROGRAM = """
import json, sys
from hta.trace_analysis import TraceAnalysis
# every ProfilerStep, the last one too (HTA leaves it out by default, as possibly cut short): rlprof reads
# every iteration the trace recorded
a = TraceAnalysis(trace_dir=sys.argv[1], include_last_profiler_step=sys.argv[2] == "temporal")
out = {"ranks": sorted(int(r) for r in a.t.traces)}
if sys.argv[2] == "iterations":
    rank = out["ranks"][0]
    out["iterations"] = [int(i) for i in a.t.get_iterations(rank)]
    # a per-iteration analysis: the operators HTA places in each iteration
    df = a.t.get_trace(rank)
    per = df[df["iteration"] >= 0].groupby("iteration").size()
    out["events_per_iteration"] = {str(int(k)): int(v) for k, v in per.items()}
elif sys.argv[2] == "temporal":
    # HTA's own temporal breakdown (BreakdownAnalysis.get_temporal_breakdown's per-rank computation: the
    # device events merged across streams, compute kernels by HTA's kernel types), on the events HTA
    # assigns to iterations
    from hta.analyzers.breakdown_analysis import BreakdownAnalysis
    from hta.utils.utils import KernelType, get_kernel_type, merge_kernel_intervals
    sym = a.t.symbol_table.get_sym_table()
    out["temporal"] = {}
    for rank, df in a.t.traces.items():
        gpu = df[df["stream"].ne(-1) & df["iteration"].ge(0)].copy()
        idle, window = BreakdownAnalysis._get_idle_time_for_kernels(gpu)
        gpu["kind"] = gpu["name"].apply(lambda n: get_kernel_type(sym[n]))
        comp = merge_kernel_intervals(gpu[gpu["kind"].eq(KernelType.COMPUTATION.name)].copy())
        compute = comp.end.sum() - comp.ts.sum()
        out["temporal"][str(rank)] = {"window_us": float(window), "idle_pct": 100.0 * float(idle) / float(window),
                                      "compute_pct": 100.0 * float(compute) / float(window)}
print("RESULT " + json.dumps(out))
"""


def hta(folder: Path, question: str = "ranks") -> dict:
    """What HolisticTraceAnalysis makes of a folder of rank traces."""
    if not HTA_PYTHON.exists():
        pytest.skip("HolisticTraceAnalysis environment (.venv-hta) not built: make env")
    proc = subprocess.run([str(HTA_PYTHON), "-c", _PROGRAM, str(folder), question], capture_output=True, text=True,
                          timeout=300)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-2000:] + proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


def hta_temporal(folder: Path) -> dict[str, dict[str, float]]:
    """``{rank: {window_us, idle_pct, compute_pct}}``: HTA's temporal breakdown of each rank's iterations."""
    return hta(folder, "temporal")["temporal"]


def hta_ranks(folder: Path) -> list[int]:
    """The ranks HolisticTraceAnalysis loads from ``folder``."""
    return hta(folder)["ranks"]
