"""Reading and writing traces fast without losing anything.

The reader cuts the event array into batches at closing braces it cannot
see the context of; the writer splices gzip parts made in other processes;
JSON and gzip come from msgspec / zlib-ng when installed. Each is checked
against the standard library's own reading of the same bytes (``json``,
``gzip``, and the system's ``gzip -t`` where installed), on inputs built to
put braces, commas and brackets where a careless cut would break them.
"""

import gzip
import json
import os
import random
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from rlprof_plugins.store import step_files
from rlprof_plugins.trace.format import codec, gz, reader

from rlprof_plugins.trace.rewrite import merge
from rlprof_plugins._progress import Ticker
from rlprof_plugins.trace.format.reader import TraceFormatError, TraceReader
from rlprof_plugins.trace.format.writer import PartWriter, TraceWriter
from tests.helpers.kineto_gpu import write_gpu_rank

REPO = Path(__file__).resolve().parents[2]


def tricky_events(n: int, seed: int = 1) -> list[dict]:
    """Events whose strings and args hold what a cut looks for: '}', '},{', '}]', nested objects in arrays."""
    rnd = random.Random(seed)
    out = []
    for k in range(n):
        e = {"ph": "X", "cat": "cpu_op", "name": rnd.choice(["a}", "b},{", "c}]", "d\\\"}", "é}", "plain"]),
             "pid": k % 3, "tid": 1, "ts": k * 1.5, "dur": 1.25,
             "args": {"nested": [{"x": "}"}, {"y": [1, {"z": "},\n  {"}]}], "External id": k}}
        if k % 7 == 0:
            e["args"]["big"] = 2**70 + k  # wider than 64 bits: must stay exact
        out.append(e)
    return out


@pytest.mark.parametrize("indent", [None, 2])
def test_batches_cut_only_between_events(tmp_path, monkeypatch, indent):
    events = tricky_events(400)
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events, "traceName": "t"}, indent=indent,
                               ensure_ascii=False))
    monkeypatch.setattr(reader, "BATCH_BYTES", 300)  # a cut every event or two, most at a misleading brace
    with TraceReader(path) as r:
        batches = list(r.batches())
        assert r.header == {"schemaVersion": 1} and r.trailer == {"traceName": "t"}
    assert len(batches) > 100
    assert [e for b in batches for e in b] == json.loads(path.read_text())["traceEvents"]


def test_what_the_fast_decoder_refuses_is_read_as_json_reads_it(tmp_path):
    text = '{"traceEvents": [{"ph": "C", "name": "n", "pid": 1, "ts": 1, "args": {"v": NaN, "w": 1e400}},' \
           '{"ph": "X", "name": "ok", "pid": 1, "tid": 1, "ts": 2, "dur": 1}]}'
    path = tmp_path / "nan.json"
    path.write_text(text)
    with TraceReader(path) as r:
        got = list(r.events())
    expected = json.loads(text)["traceEvents"]
    assert got[1] == expected[1]
    assert str(got[0]["args"]) == str(expected[0]["args"])  # nan != nan; inf == inf


def test_a_non_object_event_and_truncation_are_named(tmp_path):
    (tmp_path / "n.json").write_text('{"traceEvents": [{"ph": "X"}, 5]}')
    with pytest.raises(TraceFormatError, match="n.json: an event is not an object"):
        with TraceReader(tmp_path / "n.json") as r:
            list(r.events())
    whole = gzip.compress(json.dumps({"traceEvents": tricky_events(2000)}).encode())
    (tmp_path / "cut.json.gz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(TraceFormatError, match="cut.json.gz: (corrupt or truncated|truncated)"):
        with TraceReader(tmp_path / "cut.json.gz") as r:
            list(r.events())


def test_writer_round_trips_events_exactly(tmp_path):
    events = tricky_events(3000)
    out = tmp_path / "w.pt.trace.json.gz"
    with TraceWriter(out, {"schemaVersion": 1, "distributedInfo": {"rank": 3}}) as w:
        w.write_batch(events[:1000])
        for e in events[1000:]:
            w.write(e)
        w.close({"traceName": "w"})
    data = json.loads(gzip.decompress(out.read_bytes()))
    assert data["traceEvents"] == events and data["traceName"] == "w"
    assert '"rank": 3' in gzip.decompress(out.read_bytes()).decode()  # Kineto's header text, for HTA


def test_crc32_combine_matches_zlib():
    rnd = random.Random(7)
    for _ in range(20):
        a, b = rnd.randbytes(rnd.randrange(0, 5000)), rnd.randbytes(rnd.randrange(0, 5000))
        assert gz._crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)
        assert gz.crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


def test_spliced_parts_make_one_ordinary_gzip_member(tmp_path):
    events = tricky_events(2500)
    parts = []
    for k, chunk in enumerate((events[:1000], [], events[1000:])):
        pw = PartWriter(tmp_path / f"p{k}")
        pw.write_batch(chunk)
        parts.append(pw.close())
    out = tmp_path / "spliced.pt.trace.json.gz"
    with TraceWriter(out, {"schemaVersion": 1}) as w:
        w.write({"ph": "M", "name": "first", "pid": 0})
        for p in parts:
            w.append_part(p)
        w.close()
    raw = out.read_bytes()
    assert raw.count(gz.MAGIC) >= 1 and len(gzip.decompress(raw)) > 0
    assert json.loads(gzip.decompress(raw))["traceEvents"] == [{"ph": "M", "name": "first", "pid": 0}] + events
    # one member: zlib in single-member mode reads it to the end, trailer checked
    d = zlib.decompressobj(31)
    d.decompress(raw)
    assert d.eof and d.unused_data == b""
    if shutil.which("gzip"):
        assert subprocess.run(["gzip", "-t", str(out)]).returncode == 0


def test_inflated_reads_members_and_padding(tmp_path):
    (tmp_path / "m.gz").write_bytes(gzip.compress(b"a" * 100_000) + gzip.compress(b"b" * 10) + b"\0" * 8)
    assert b"".join(gz.read_chunks(tmp_path / "m.gz", 1000)) == b"a" * 100_000 + b"b" * 10


def _events_of(path: Path) -> list:
    return json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


def test_parallel_merge_writes_what_one_process_writes(tmp_path):
    step = tmp_path / "step"
    step.mkdir()
    for k in range(3):
        write_gpu_rank(step / f"rank{k}.{100 + k}.pt.trace.json.gz", rank=k, world=3, megabytes=1.5, layers=4,
                       seed=k)
    (group,) = step_files.plan(step).groups
    one = merge.merge(group, tmp_path / "one.pt.trace.json.gz", jobs=1)
    many = merge.merge(group, tmp_path / "many.pt.trace.json.gz", jobs=3)
    assert one.events == many.events > 0
    a, b = _events_of(one.output), _events_of(many.output)
    assert a == b
    assert len({e["pid"] for e in a}) == 3 * 2  # CPU and GPU of each rank, apart
    assert not list(tmp_path.glob(".*.tmp")) and not list(tmp_path.glob(".*part*"))


def test_a_failing_rank_leaves_no_parts_or_output(tmp_path):
    step = tmp_path / "step"
    step.mkdir()
    write_gpu_rank(step / "rank0.1.pt.trace.json.gz", rank=0, megabytes=1, layers=4)
    good = gzip.decompress((step / "rank0.1.pt.trace.json.gz").read_bytes())
    (step / "rank1.2.pt.trace.json.gz").write_bytes(gzip.compress(good[: len(good) * 2 // 3]))  # cut mid-array
    (group,) = step_files.plan(step).groups
    with pytest.raises(TraceFormatError, match="rank1"):
        merge.merge(group, tmp_path / "out" / "m.pt.trace.json.gz", jobs=2)
    assert not (tmp_path / "out").exists()
    assert sorted(p.name for p in step.iterdir()) == ["rank0.1.pt.trace.json.gz", "rank1.2.pt.trace.json.gz"]


def test_standard_library_alone_writes_the_same_trace(tmp_path):
    """Without msgspec and zlib-ng (RLPROF_TRACE_ACCEL=none) the tools read
    and write the same events; only slower."""
    step = tmp_path / "step"
    step.mkdir()
    for k in range(2):
        write_gpu_rank(step / f"rank{k}.{100 + k}.pt.trace.json.gz", rank=k, megabytes=1, layers=4, seed=k)
    outs = {}
    for accel in ("none", "msgspec,zlib-ng"):
        out = tmp_path / f"{accel}.pt.trace.json.gz"
        code = ("import sys; from rlprof_plugins.trace.format import codec; from rlprof_plugins.trace.format import gz; "
                "print(codec.JSON_LIBRARY, gz.GZIP_LIBRARY, file=sys.stderr); "
                "from rlprof_plugins.cli import main; sys.exit(main(sys.argv[1:]))")
        proc = subprocess.run([sys.executable, "-c", code, "merge", str(step), "-o", str(out), "-q"],
                              env={**os.environ, codec.ENV: accel}, capture_output=True, text=True, cwd=REPO)
        assert proc.returncode == 0, proc.stderr
        outs[accel] = (proc.stderr.split(), _events_of(out))
    assert outs["none"][0] == ["json", "zlib"]
    assert outs["msgspec,zlib-ng"][0] == ["msgspec", "zlib-ng"]
    assert outs["none"][1] == outs["msgspec,zlib-ng"][1]


def test_fields_decoder_items_answer_like_dicts():
    decode = codec.fields_decoder("ph", "ts", "name")
    if decode is None:
        pytest.skip("msgspec not installed")
    (item,) = decode(b'[{"ph": "X", "ts": 1.5, "args": {"big": 1}, "name": null}]')
    assert item.get("ph") == "X" and item["ts"] == 1.5 and "name" not in item and item.get("name", "") == ""
    assert codec.is_fields(type(item)) and not codec.is_fields(dict)


def test_ticker_reports_at_most_once_per_interval():
    lines = []
    t = Ticker(lines.append, "rank0", 10_000_000, every_s=0.0)
    t.update(5_000_000)
    t.update(10_000_000)
    assert lines == ["  rank0: 50% of 10 MB", "  rank0: 100% of 10 MB"]
    quiet = Ticker(lines.append, "rank1", 100, every_s=3600)
    quiet.update(50)
    assert len(lines) == 2


def test_workers_end_with_a_killed_merge(tmp_path):
    """A merge killed by a timeout (``merge_in_subprocess``) must not leave
    worker processes behind, still writing."""
    step = tmp_path / "step"
    step.mkdir()
    for k in range(2):
        write_gpu_rank(step / f"rank{k}.{100 + k}.pt.trace.json.gz", rank=k, megabytes=40, layers=8, seed=k)
    proc = subprocess.Popen([sys.executable, "-m", "rlprof_plugins.cli", "merge", str(step), "--jobs", "2"],
                            cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr.readline().startswith("merging 2 traces")
        deadline = time.monotonic() + 30
        workers: list[int] = []
        while len(workers) < 2 and time.monotonic() < deadline:
            workers = [int(c) for tid in os.listdir(f"/proc/{proc.pid}/task")
                       for c in Path(f"/proc/{proc.pid}/task/{tid}/children").read_text().split()]
            workers = [w for w in workers if "spawn_main" in Path(f"/proc/{w}/cmdline").read_text()]
            time.sleep(0.05)
        assert len(workers) == 2
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 60  # a bound on workers left running, not a time they are given
    while any(Path(f"/proc/{w}").exists() and "spawn_main" in _cmdline(w) for w in workers) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [w for w in workers if Path(f"/proc/{w}").exists() and "spawn_main" in _cmdline(w)]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text()
    except OSError:
        return ""


def test_each_tool_reports_progress_per_input(tmp_path, monkeypatch):
    """Progress lines (once a second; here on every batch) name the input and how far it is."""
    from rlprof_plugins import _progress as progress
    from rlprof_plugins.trace.rewrite import stage_split
    from rlprof_plugins.report.render import summary
    from tests.helpers.synthetic_traces import write_rank_trace

    monkeypatch.setattr(progress, "EVERY_S", 0.0)
    monkeypatch.setattr(reader, "BATCH_BYTES", 64 << 10)
    step = tmp_path / "global_step_1"
    step.mkdir()
    for k in range(2):
        write_rank_trace(step / f"rank{k}.{100 + k}.pt.trace.json.gz", rank=k, iterations=2000, padding=200)
    lines: list[str] = []
    (group,) = step_files.plan(step).groups
    merge.merge(group, tmp_path / "m.pt.trace.json.gz", progress=lines.append, jobs=1)
    assert lines[0].startswith("merging 2 traces") and "one process" in lines[0]
    for label in ("rank0", "rank1"):
        shares = [float(x.split(": ")[1].split("%")[0]) for x in lines if x.startswith(f"  {label}: ")]
        assert len(shares) > 3 and shares == sorted(shares) and shares[-1] == 100.0
    lines.clear()
    stage_split.split_file(step / "rank0.100.pt.trace.json.gz", tmp_path / "s-{stage}", "r0", progress=lines.append)
    assert any(x.startswith("  iterations: ") for x in lines) and any(x.startswith("  events: ") for x in lines)
    lines.clear()
    summary.summarise(step, progress=lines.append)
    assert lines[0].startswith("reading 2 traces")


def _sorted_self_times(path: Path) -> dict[str, float]:
    """CPU self time the way it is defined: every operator of a thread, sorted, nested by time."""
    per_thread: dict = {}
    for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") == "cpu_op":
            per_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"], e["name"]))
    out: dict[str, float] = {}
    for ops in per_thread.values():
        ops.sort(key=lambda o: (o[0], -o[1]))
        stack: list = []
        for start, end, name in ops + [(float("inf"), float("inf"), None)]:
            while stack and stack[-1][0] <= start:
                e_end, e_name, children, own = stack.pop()
                out[e_name] = out.get(e_name, 0.0) + max(0.0, own - children)
            if name is None:
                break
            if stack:
                stack[-1][2] += end - start
            stack.append([end, name, 0.0, end - start])
    return out


def test_streamed_cpu_self_time_equals_the_sorted_definition():
    """trace_stats keeps only each thread's open operators (flat memory); on the real
    server traces that gives exactly the self times of sorting every operator."""
    from rlprof_plugins.trace.analysis.trace_stats import trace_stats

    for path in sorted((REPO / "tests" / "fixtures" / "vllm-0.32-cpu-tp2").rglob("rank*.pt.trace.json.gz")):
        st = trace_stats(path, "r", None)
        expected = _sorted_self_times(path)
        assert st.cpu_out_of_order == 0 and set(st.cpu_self) == set(expected) and expected
        assert all(abs(st.cpu_self[k] - v) < 1e-6 for k, v in expected.items()), path.name


def test_keys_after_the_events_do_not_cost_a_decode_per_event(tmp_path, monkeypatch):
    """A merged trace ends with keys whose nested objects end in '},' (rlprof_merge's
    ranks, older Kineto's deviceProperties): the first cut lands there. The reader
    must step back to the array's end, not fall back to one event at a time (which
    made `rlprof check` of a merged fixture take a minute)."""
    events = tricky_events(3000)
    path = tmp_path / "merged.json"
    path.write_text(json.dumps({"traceEvents": events, "traceName": "m",
                                "rlprof_merge": {"ranks": [{"label": f"rank{k}", "pids": [k]} for k in range(50)]}}))
    calls = []
    real = codec.decode
    monkeypatch.setattr(codec, "decode", lambda text: calls.append(len(text)) or real(text))
    with TraceReader(path) as r:
        assert list(r.events()) == events
        assert r.trailer["rlprof_merge"]["ranks"][49] == {"label": "rank49", "pids": [49]}
    assert len(calls) <= 4, len(calls)
