"""The report on real GPU traces that others recorded and published (tests/fixtures/gpu-published/SOURCE.md).

No GPU is lent to this project's machines: these Kineto traces, recorded on
NVIDIA A100s (NCCL jobs of 8, 16 and 128 ranks, several compute streams) and
on an AMD MI250 (ROCm 6.2, no ``distributedInfo``), are the real hardware's
evidence. Each folder is read as users hand them over: torch's default file
names, no manifest, no global step.

- Each rank's device time over its iterations is a partition: compute,
  exposed communication, exposed memcpy and idle add up to the window.
- Its idle and compute shares agree with HolisticTraceAnalysis's own
  temporal breakdown (run in .venv-hta on the same files, restricted to the
  kernels HTA assigns to iterations) within 1 point.
- A ROCm trace without rank information reads as rank 0, with iterations
  and device time; two ranks of a 128-rank job say what is missing in one
  line, and nothing says ``None``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rlprof_plugins.cli.command import main as rlprof
from tests.helpers.hta import hta_temporal

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gpu-published"
NVIDIA = ("two-ranks-of-128", "rank3-of-8", "rank0-of-16")
PARTS = ("compute_ms", "exposed_communication_ms", "exposed_memcpy_ms", "idle_ms", "between_iterations_ms")


def run(capsys, args: list[str]) -> tuple[int, str]:
    """``rlprof ARGS``: its exit code and everything it printed."""
    code = rlprof(args)
    out = capsys.readouterr()
    return code, out.out + out.err


def report_of(tmp_path: Path, capsys, name: str) -> tuple[dict, int]:
    folder = tmp_path / name
    shutil.copytree(FIXTURES / name, folder)
    code, _ = run(capsys, ["report", str(folder), "--json", str(tmp_path / f"{name}.json"), "-q"])
    return json.loads((tmp_path / f"{name}.json").read_text()), code


@pytest.mark.parametrize("name", NVIDIA)
def test_device_time_is_a_partition_and_agrees_with_hta(tmp_path, capsys, name):
    data, _ = report_of(tmp_path, capsys, name)
    (step,) = data["steps"]
    times = step["rank_time"]
    assert times and all(t["device"] for t in times.values())
    hta = hta_temporal(FIXTURES / name)
    assert sorted(f"rank{r}" for r in hta) == sorted(times)
    for rank, t in times.items():
        d = t["device"]
        assert abs(sum(d[k] for k in PARTS) - d["window_ms"]) <= 0.005 * d["window_ms"], (rank, d)
        assert d["communication_ms"] >= d["exposed_communication_ms"] > 0 and d["memcpy_ms"] >= d["exposed_memcpy_ms"]
        theirs = hta[rank.removeprefix("rank")]
        assert abs(d["window_ms"] - theirs["window_us"] / 1000) <= 0.001 * d["window_ms"], (rank, d, theirs)
        idle = d["idle_ms"] + d["between_iterations_ms"]  # HTA's idle: over the rank's whole kernel window
        assert abs(100 * idle / d["window_ms"] - theirs["idle_pct"]) <= 1.0, (rank, d, theirs)
        assert abs(100 * d["compute_ms"] / d["window_ms"] - theirs["compute_pct"]) <= 1.0, (rank, d, theirs)


def test_a_2021_kineto_trace_reads_as_todays(tmp_path, capsys):
    """A V100 trace from June 2021 (pytorch/kineto's own sample): Kineto's categories before they were renamed
    (``Operator``, ``Runtime``, ``Kernel``, ``Memcpy``, ``Memset``), no ``distributedInfo``. Its six
    ``ProfilerStep``s are its iterations, and its device time agrees with HTA's within 1 point (its idle: the
    idle inside the iterations and the host's time between them, 285 ms of data loading)."""
    data, code = report_of(tmp_path, capsys, "v100-2021")
    assert code == 0, data["notes"]
    (step,) = data["steps"]
    assert step["ranks"] == ["rank0"] and step["iterations"] == 6 and step["operators"]["device"]
    d = step["rank_time"]["rank0"]["device"]
    assert abs(sum(d[k] for k in PARTS) - d["window_ms"]) <= 0.005 * d["window_ms"], d
    assert d["memcpy_ms"] > 0 and d["between_iterations_ms"] > 0 and d["communication_ms"] == 0
    theirs = hta_temporal(FIXTURES / "v100-2021")["0"]
    assert abs(d["window_ms"] - theirs["window_us"] / 1000) <= 0.001 * d["window_ms"], (d, theirs)
    idle = d["idle_ms"] + d["between_iterations_ms"]
    assert abs(100 * idle / d["window_ms"] - theirs["idle_pct"]) <= 1.0, (d, theirs)
    assert abs(100 * d["compute_ms"] / d["window_ms"] - theirs["compute_pct"]) <= 1.0, (d, theirs)


def test_several_compute_streams_count_compute_once(tmp_path, capsys):
    """rank3-of-8 runs kernels on several streams at once: compute is their merged intervals (HTA: 60.6%),
    not the sum of kernel times nor the busiest stream's."""
    data, _ = report_of(tmp_path, capsys, "rank3-of-8")
    d = data["steps"][0]["rank_time"]["rank3"]["device"]
    assert 59.5 <= 100 * d["compute_ms"] / d["window_ms"] <= 61.5 and 15.5 <= 100 * d["idle_ms"] / d["window_ms"] <= 17.5


def test_a_rocm_trace_without_rank_information_reads_as_rank0(tmp_path, capsys):
    data, code = report_of(tmp_path, capsys, "rocm-mi250")
    assert code == 0, data["notes"]
    (step,) = data["steps"]
    assert step["ranks"] == ["rank0"] and step["iterations"] >= 2
    d = step["rank_time"]["rank0"]["device"]
    assert d["compute_ms"] > 0 and abs(sum(d[k] for k in PARTS) - d["window_ms"]) <= 0.005 * d["window_ms"]
    assert any("rank0: amd-host_597913" in note and "no rank in its name or its trace" in note
               for note in data["notes"])
    page = (tmp_path / "rocm-mi250" / "report.html").read_text()
    assert "data-assumed-rank" in page and "traces in rocm-mi250 (no global step)" in page
    code, said = run(capsys, ["summary", str(tmp_path / "rocm-mi250")])
    assert code == 0 and "rocm-mi250" in said and "None" not in said, said


def test_two_ranks_of_a_128_rank_job_say_what_is_missing_in_one_line(tmp_path, capsys):
    folder = tmp_path / "two-ranks-of-128"
    shutil.copytree(FIXTURES / "two-ranks-of-128", folder)
    expected = "2 of 128 ranks here; missing rank2-rank127"
    for args in (["summary", str(folder)], ["merge", str(folder), "-q"], ["report", str(folder), "-q"]):
        _, said = run(capsys, args)
        lines = [line for line in said.splitlines() if "missing" in line or "lacks" in line]
        assert len(lines) == 1 and expected in lines[0], (args, said)
        assert "None" not in said, (args, said)


def test_the_pass_holds_a_chunk_at_a_time_and_gives_the_same_numbers(monkeypatch):
    """Memory flat in the trace's size: the operators and the launches of a pass are kept a chunk at a time
    (``trace.spill``) and the device items are walked in start order by merging the trace's own ascending
    runs (``device_time.in_order``), without a list of every item. On each real GPU fixture, chunks of 997
    rows (the fixtures' tens of thousands of operators and launches: dozens of chunks) and a plain sort
    instead of the runs give exactly the numbers of one chunk."""
    from rlprof_plugins.trace import device_time, spill
    from rlprof_plugins.trace.trace_stats import trace_stats

    def numbers(path: Path) -> tuple:
        st = trace_stats(path, "rank0", None)
        assert st.error is None
        return (st.device, st.iteration_device, st.stage_ops, dict(st.cpu_self), st.iteration_list)

    paths = sorted(p for name in NVIDIA for p in (FIXTURES / name).rglob("*.json*"))
    whole = [numbers(p) for p in paths]
    assert all(w[0] and w[1] for w in whole)
    monkeypatch.setattr(spill, "CHUNK", 997)
    monkeypatch.setattr(device_time, "MAX_RUNS", 1)
    assert [numbers(p) for p in paths] == whole
    monkeypatch.setattr(device_time, "MAX_RUNS", 4096)
    assert [numbers(p) for p in paths] == whole
    runs = [3.0, 4.0, 9.0, 1.0, 2.0, 9.5, 0.5, 8.0, 8.0]  # three ascending runs, a tie
    from array import array
    assert [runs[k] for k in device_time.in_order(array("d", runs))] == sorted(runs)
