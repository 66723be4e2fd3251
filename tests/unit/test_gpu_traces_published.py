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

import gzip
import json
import re
import shutil
import zipfile
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


def tracelens_gpu_timeline(xlsx: Path) -> dict[str, float]:
    """TraceLens's published GPU timeline (ms) from its report's ``gpu_timeline`` sheet (inline strings and
    numbers: read with the standard library)."""
    with zipfile.ZipFile(xlsx) as book:
        workbook = book.read("xl/workbook.xml").decode()
        sheets = re.findall(r'<sheet name="([^"]+)"[^>]*r:id="rId(\d+)"', workbook)
        number = dict(sheets)["gpu_timeline"]
        sheet = book.read(f"xl/worksheets/sheet{number}.xml").decode()
    out = {}
    for row in re.findall(r"<row[^>]*>(.*?)</row>", sheet)[1:]:
        name = re.search(r"<t>([^<]*)</t>", row).group(1)
        out[name] = float(re.search(r"<v>([^<]*)</v>", row).group(1))
    return out


TRACELENS = {"tracelens-vllm-decode-mi300x": ("vllm", "decode"),
             "tracelens-vllm-prefilldecode-mi300x": ("vllm", "prefill"),
             "tracelens-sglang-decode-mi300x": ("vllm", "decode"),
             "tracelens-sglang-prefilldecode-mi300x": ("vllm", "prefill"),
             "tracelens-vllm-tp8-b200": ("vllm", "prefill")}


@pytest.mark.parametrize("name", sorted(TRACELENS))
def test_inference_servers_traces_read_their_iterations_and_stages(tmp_path, capsys, name):
    """vLLM's and SGLang's GPU traces (TraceLens's test data): the iterations and their stages from the engines'
    own annotations (vLLM's ``execute_..._context_N(..)_generation_M(..)``, which these SGLang traces hold beside
    its ``step[...]``: the same iteration, the same stage), and a device partition that fills the window."""
    data, _ = report_of(tmp_path, capsys, name)
    (step,) = data["steps"]
    source, stage = TRACELENS[name]
    assert step["sources"] == [source] and step["iterations"] == 1, step
    assert set(step["stages"]) == {stage}, step["stages"]
    (times,) = step["rank_time"].values()
    d = times["device"]
    assert abs(sum(d[k] for k in PARTS) - d["window_ms"]) <= 0.005 * d["window_ms"], d
    assert d["compute_ms"] > 0 and times["device_by_stage"][stage]["compute_ms"] == d["compute_ms"]


def test_a_vllm_decode_agrees_with_tracelenss_published_gpu_timeline(tmp_path, capsys):
    """The one trace TraceLens publishes its own GPU timeline for: every part within 0.05 ms of it."""
    data, _ = report_of(tmp_path, capsys, "tracelens-vllm-decode-mi300x")
    d = data["steps"][0]["rank_time"]["rank0"]["device"]
    theirs = tracelens_gpu_timeline(FIXTURES / "tracelens-vllm-decode-mi300x" / "tracelens_perf_report.xlsx")
    pairs = {"computation_time": "compute_ms", "exposed_comm_time": "exposed_communication_ms",
             "exposed_memcpy_time": "exposed_memcpy_ms", "idle_time": "idle_ms", "total_time": "window_ms",
             "total_comm_time": "communication_ms", "total_memcpy_time": "memcpy_ms"}
    for their_key, ours in pairs.items():
        assert abs(d[ours] - theirs[their_key]) <= 0.05, (ours, d, theirs)
    assert d["between_iterations_ms"] == 0.0  # one iteration: its window is the rank's


def test_symmetric_memory_all_reduce_on_a_b200_is_communication(tmp_path, capsys):
    """Rank 0 of vLLM TP=8 on a B200 all-reduces through torch's symmetric memory (``multimem_all_reduce_kernel``,
    73 launches): rlprof counts them as communication (HTA's kernel types call them computation: names without
    ``nccl``), so the rank's exposed communication is their time that no compute covered."""
    data, _ = report_of(tmp_path, capsys, "tracelens-vllm-tp8-b200")
    d = data["steps"][0]["rank_time"]["rank0"]["device"]
    (path,) = (FIXTURES / "tracelens-vllm-tp8-b200").glob("*.json.gz")
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    multimem = [e for e in events if e.get("cat") == "kernel" and "multimem_all_reduce_kernel" in e["name"]]
    assert len(multimem) == 73
    # each runs alone on its stream (eager: no compute beside it), so they are all exposed
    assert d["communication_ms"] >= sum(e["dur"] for e in multimem) / 1000 - 0.01
    assert d["exposed_communication_ms"] > 0.9 * d["communication_ms"] > 0


def test_several_compute_streams_count_compute_once(tmp_path, capsys):
    """rank3-of-8 runs kernels on several streams at once: compute is their merged intervals (HTA: 60.6%),
    not the sum of kernel times nor the busiest stream's."""
    data, _ = report_of(tmp_path, capsys, "rank3-of-8")
    d = data["steps"][0]["rank_time"]["rank3"]["device"]
    assert 59.5 <= 100 * d["compute_ms"] / d["window_ms"] <= 61.5
    assert 15.5 <= 100 * (d["idle_ms"] + d["between_iterations_ms"]) / d["window_ms"] <= 17.5


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
    (``trace.analysis.spill``) and the device items are walked in start order by merging the trace's own ascending
    runs (``device_time.in_order``), without a list of every item. On each real GPU fixture, chunks of 997
    rows (the fixtures' tens of thousands of operators and launches: dozens of chunks) and a plain sort
    instead of the runs give exactly the numbers of one chunk."""
    from rlprof_plugins.trace.analysis import device_time
    from rlprof_plugins.trace.analysis import spill
    from rlprof_plugins.trace.analysis.trace_stats import trace_stats

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
