"""What travels between Ray nodes and the report's driver (``report.execute.wire``): plain JSON, read the same
by every Python and every release, and nothing in it can make the reader run code.

A real trace's summary (``trace_stats`` over a vLLM TP=2 fixture's rank trace) round-trips exactly (types
included: tuples, ``Path``, running sums); the blob is JSON that each other Python on this machine (3.10 to
3.13 where present) reads with the standard library alone, its path a string (on 3.13 a pickled
``pathlib.Path`` names ``pathlib._local``, which is how a pickled format broke across interpreters); a
plan's non-string keys and tuples come back as they went, bytes never travel; a node's plan comes back as
the plan's own records; a tampered or foreign blob, or a record this release does not name, is refused."""

import dataclasses
import json
import shutil
import subprocess
import zlib
from pathlib import Path

import pytest

from rlprof_plugins.report.execute.wire import WireError, pack, unpack
from rlprof_plugins.trace.analysis.trace_stats import TraceStats, trace_stats

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-0.32-cpu-tp2" / "global_step_3" / "ranks"


def real_stats() -> TraceStats:
    (trace,) = FIXTURE.glob("rank0.*.pt.trace.json.gz")
    stats = trace_stats(trace, "rank0", None)
    assert stats.error is None and stats.iterations > 0
    return stats


def test_a_trace_summary_round_trips_exactly_with_its_types():
    stats = real_stats()
    back = unpack(pack(stats))
    fields = [f.name for f in dataclasses.fields(TraceStats)]
    assert isinstance(back, TraceStats)
    assert {f: getattr(back, f) for f in fields} == {f: getattr(stats, f) for f in fields}
    assert isinstance(back.path, Path) and back.path == stats.path
    assert all(isinstance(it, tuple) and isinstance(it[0], tuple) for it in back.iteration_list)
    back.device_ops["never seen"] += 1.0  # the running sums keep working as the pass made them
    assert back.device_ops["never seen"] == 1.0


def test_a_plan_with_non_string_keys_round_trips_and_bytes_are_refused():
    plan = {"files": [["a/b.json", 12, 1700000000000000000, "file"]], "by_rank": {(0, "prefill"): [1.5, None]},
            "exists": True, "ranks": {"rank1", "rank0"}}
    assert unpack(pack(plan)) == {**plan, "ranks": ["rank0", "rank1"]}
    with pytest.raises(TypeError, match="not bytes"):  # no file travels whole: a node sends what it read, typed
        pack({"contents": {"a/b.json": b"\x00{}\xff"}})


def test_a_nodes_plan_round_trips_as_its_records_and_a_foreign_record_is_refused():
    """A server's view as a node plans it (its step folder's groups, jobs, files and memory) comes back equal,
    each record its own type; a record this release does not name, or a field its class lacks, is refused."""
    from rlprof_plugins.report.plan.planner import plan_server
    from rlprof_plugins.store.servers import Replica

    root = FIXTURE.parents[1]
    server = plan_server(root, Replica("", root), {}, [])
    back = unpack(pack(server))
    jobs = [job for step in back.planned.values() for job in step.jobs]
    assert back == server and jobs and all(isinstance(job.path, Path) for job in jobs)
    for name, field, said in (("os.system", "rel", "os.system"), ("ServerView", "__class__", "__class__")):
        tampered = json.loads(zlib.decompress(pack(server)))
        tampered["__record__"][0] = name
        tampered["__record__"][1][field] = "x"
        with pytest.raises(WireError, match=said):
            unpack(zlib.compress(json.dumps(tampered).encode()))


def interpreter(version: str) -> str | None:
    """A Python ``version`` that runs here: on the PATH, else pyenv's own folder of it (its shims serve only
    the global version)."""
    import glob
    import os

    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    for exe in [shutil.which(f"python{version}"), *sorted(glob.glob(f"{root}/versions/{version}.*/bin/python{version}"))]:
        if exe and subprocess.run([exe, "-c", "pass"], capture_output=True).returncode == 0:
            return exe
    return None


@pytest.mark.parametrize("version", ["3.10", "3.11", "3.12", "3.13"])
def test_every_python_reads_a_blob_with_the_standard_library_alone(version, tmp_path):
    exe = interpreter(version)
    if exe is None:
        pytest.skip(f"no Python {version} on this machine")
    blob = tmp_path / "blob"
    blob.write_bytes(pack(real_stats()))
    read = subprocess.run([exe, "-I", "-c", "import json, sys, zlib; d = json.loads(zlib.decompress("
                           "open(sys.argv[1], 'rb').read()))['__record__'][1]; "
                           "print(json.dumps({'path': d['path'], 'n': len(d['iteration_list'])}))", str(blob)],
                          capture_output=True, text=True, timeout=60)
    assert read.returncode == 0, read.stderr
    seen = json.loads(read.stdout)
    stats = real_stats()
    assert seen == {"path": str(stats.path), "n": stats.iterations}


def test_a_tampered_or_foreign_blob_is_refused():
    plain = json.loads(zlib.decompress(pack(real_stats())))
    plain["__record__"][1]["__class__"] = "os.system"
    with pytest.raises(WireError, match="__class__"):
        unpack(zlib.compress(json.dumps(plain).encode()))
    import pickle

    with pytest.raises(WireError):
        unpack(zlib.compress(pickle.dumps(real_stats())))  # the old format, or anything not JSON
    with pytest.raises(TypeError):
        pack({"a": object()})
