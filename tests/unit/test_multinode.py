"""A server spanning nodes, in the files: per-node manifests, the lock on
mounts that refuse flock, a collected step, merges that name missing ranks,
and clocks aligned across hosts.

Inputs: the real TP=2 traces of the vLLM 0.32 CPU server
(tests/fixtures/vllm-0.32-cpu-tp2) with rank1's clock moved by 250 ms and the
two ranks' manifest sections placed on two hosts, as two nodes without a
common clock would write them. The two-node servers themselves run in
tests/e2e/test_vllm_two_nodes.py.
"""

import errno
import gzip
import json
import multiprocessing
import shutil
from pathlib import Path

import pytest

from rlprof_plugins.store import manifest
from rlprof_plugins.cli.command import main as rlprof
from rlprof_plugins.trace.format import check
from tests.helpers.traces import merged_file

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-0.32-cpu-tp2"
SKEW_NS = 250_000_000


def load(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def two_hosts(tmp_path: Path, skew_ns: int = SKEW_NS) -> Path:
    """Step 3 of the TP=2 fixture as if rank1 ran on another host whose clock is ``skew_ns`` ahead."""
    d = tmp_path / "global_step_3"
    shutil.copytree(FIXTURES / "global_step_3", d)
    rank1 = next(d.rglob("rank1.*.pt.trace.json.gz"))
    trace = load(rank1)
    trace["baseTimeNanoseconds"] += skew_ns
    with gzip.open(rank1, "wt") as f:
        json.dump(trace, f)
    data = json.loads((d / "manifest.json").read_text())
    for name, host in (("rank0", "node-a"), ("frontend", "node-a"), ("rank1", "node-b")):
        data["writers"][name]["process"] = {"host": host, "pid": 1}
    (d / "manifest.json").write_text(json.dumps(data))
    return d


def collective_ends(trace: dict, pids: list[int], limit: int = 8) -> list[float]:
    ends = sorted((e["ts"], e["ts"] + e["dur"]) for e in trace["traceEvents"]
                  if e.get("pid") in pids and e.get("name") == "_C::shm_allreduce" and e.get("ph") == "X")
    return [end for _, end in ends[:limit]]


def merged_ranks(d: Path, *args: str) -> tuple[dict, dict]:
    assert rlprof(["merge", str(d), "--quiet", *args]) == 0
    out = merged_file(d)
    assert check.check(out).ok
    trace = load(out)
    meta = trace["rlprof_merge"]
    return trace, {r["label"]: r["pids"] for r in meta["ranks"]}


# ---- clocks -----------------------------------------------------------------
def test_ranks_on_two_hosts_are_aligned_on_their_collectives(tmp_path):
    d = two_hosts(tmp_path)
    trace, pids = merged_ranks(d)
    clock = trace["rlprof_merge"]["clock"]
    assert clock["aligned_on"] == "collectives" and clock["hosts"] == ["node-a", "node-b"]
    shift = {r["label"]: r["shift_us"] for r in clock["ranks"]}
    assert abs(shift["rank1"] + SKEW_NS / 1000) < 1000  # the injected 250 ms, found back within 1 ms
    assert clock["residual_skew_us"] < 50  # paired collectives end within microseconds of each other
    ends0, ends1 = collective_ends(trace, pids["rank0"]), collective_ends(trace, pids["rank1"])
    assert len(ends0) == len(ends1) == 8
    assert max(abs(a - b) for a, b in zip(ends0, ends1)) < 1000  # every shared instant within 1 ms


def test_wall_clocks_keep_the_skew_and_say_so(tmp_path):
    d = two_hosts(tmp_path)
    trace, pids = merged_ranks(d, "--align", "clock")
    assert trace["rlprof_merge"]["clock"]["aligned_on"] == "wall clock"
    ends0, ends1 = collective_ends(trace, pids["rank0"]), collective_ends(trace, pids["rank1"])
    assert all(abs((b - a) - SKEW_NS / 1000) < 1000 for a, b in zip(ends0, ends1))


def test_one_host_keeps_its_wall_clock_unless_asked(tmp_path):
    d = tmp_path / "global_step_3"
    shutil.copytree(FIXTURES / "global_step_3", d)
    trace, _ = merged_ranks(d)
    assert trace["rlprof_merge"]["clock"]["aligned_on"] == "wall clock"
    trace, pids = merged_ranks(d, "--align", "collectives")
    clock = trace["rlprof_merge"]["clock"]
    assert clock["aligned_on"] == "collectives" and clock["residual_skew_us"] < 1000
    assert abs(clock["ranks"][1]["shift_us"]) < 1000  # one clock: next to nothing to correct


# ---- missing ranks ----------------------------------------------------------------
def one_node_of_two(tmp_path: Path) -> Path:
    """rank1's trace lives on another node: this folder has rank0 and the API server only."""
    d = tmp_path / "global_step_3"
    shutil.copytree(FIXTURES / "global_step_3", d)
    next(d.rglob("rank1.*")).unlink()
    data = json.loads((d / "manifest.json").read_text())
    del data["writers"]["rank1"]
    data["files"] = [f for f in data["files"] if f["rank"] != "rank1"]
    data["roster"] = [{"rank": "rank0", "node": 0, "host": "node-a", "directory": str(d)},
                      {"rank": "rank1", "node": 1, "host": "node-b", "directory": "/data/node-b/global_step_3"}]
    (d / "manifest.json").write_text(json.dumps(data))
    return d


def test_merge_names_a_missing_rank_and_where_it_lives(tmp_path, capsys):
    d = one_node_of_two(tmp_path)
    assert rlprof(["merge", str(d), "--json", "--quiet"]) == 0
    out = capsys.readouterr()
    assert ("global_step_3 (all): 1 of 2 ranks here; missing rank1 (node 1, host node-b, "
            "/data/node-b/global_step_3)") in out.err
    assert json.loads(out.out)["missing"] == [{"stage": "all",
                                              "rank": "rank1 (node 1, host node-b, /data/node-b/global_step_3)"}]
    assert load(merged_file(d))["rlprof_merge"]["missing"] == ["rank1 (node 1, host node-b, /data/node-b/global_step_3)"]
    assert rlprof(["merge", str(d), "--quiet", "--strict"]) == 1


def test_summary_names_a_missing_rank_and_strict_fails(tmp_path, capsys):
    d = one_node_of_two(tmp_path)
    assert rlprof(["summary", str(d), "--quiet"]) == 0
    said = capsys.readouterr()
    assert "step 3 (all): 1 of 2 ranks here; missing rank1 (node 1, host node-b" in said.err
    assert said.err.count("missing") == 1
    assert rlprof(["summary", str(d), "--quiet", "--strict"]) == 1


def test_a_folder_without_manifest_counts_ranks_from_the_traces(tmp_path, capsys):
    d = tmp_path / "global_step_3"
    shutil.copytree(FIXTURES / "global_step_3", d)
    (d / "manifest.json").unlink()
    next(d.rglob("rank0.*")).unlink()
    assert rlprof(["merge", str(d), "--quiet", "--strict"]) == 1
    assert "(all): 1 of 2 ranks here; missing rank0 " in capsys.readouterr().err


def test_a_complete_step_warns_nothing(tmp_path, capsys):
    d = tmp_path / "global_step_3"
    shutil.copytree(FIXTURES / "global_step_3", d)
    assert rlprof(["merge", str(d), "--quiet", "--strict"]) == 0
    assert "missing" not in capsys.readouterr().err


# ---- per-node manifests -------------------------------------------------------------
HEADER = manifest.engine_header(engine="vllm", engine_version="0.32.0", expected_ranks=2, parallel={"tp": 2},
                                trace_dir="/t", plugin_version="0", nodes=2)


def section(state: str, node: int) -> dict:
    return {"role": "worker", "node": node, "state": state, "files": []}


def test_node_local_folders_are_done_with_their_own_ranks(tmp_path):
    a, b = tmp_path / "a" / "global_step_1", tmp_path / "b" / "global_step_1"
    for folder, rank, node in ((a, "rank0", 0), (b, "rank1", 1)):
        manifest.update(folder, session_id="s", writer=rank, section=section("recording", node), header=HEADER)
    roster = [{"rank": "rank0", "node": 0, "host": "h0", "directory": str(a)},
              {"rank": "rank1", "node": 1, "host": "h1", "directory": str(b)}]
    done = []
    data = manifest.update(a, session_id="s", writer="rank0", section=section("done", 0),
                           header={**HEADER, "roster": roster}, on_complete=done.append)
    assert data["state"] == "done" and len(done) == 1  # the node's own ranks are written: its step is done
    assert data["nodes_here"] == [0]
    assert data["elsewhere"] == [{"node": 1, "host": "h1", "directory": str(b), "ranks": ["rank1"]}]
    assert manifest.read(b)["state"] == "recording"


def test_a_shared_folder_waits_for_every_node(tmp_path):
    d = tmp_path / "global_step_1"
    for rank, node in (("rank0", 0), ("rank1", 1)):  # every rank registers at its start
        manifest.update(d, session_id="s", writer=rank, section=section("recording", node), header=HEADER)
    assert manifest.update(d, session_id="s", writer="rank0", section=section("done", 0),
                           header=HEADER)["state"] == "recording"
    data = manifest.update(d, session_id="s", writer="rank1", section=section("done", 1), header=HEADER)
    assert data["state"] == "done" and data["nodes_here"] == [0, 1] and data["elsewhere"] == []


def test_collected_manifests_combine_into_one_complete_step(tmp_path):
    a, b, out = (tmp_path / n / "global_step_1" for n in ("a", "b", "out"))
    manifest.update(a, session_id="s", writer="rank0", section=section("done", 0), header=HEADER)
    manifest.update(a, session_id="s", writer="merge", section={"role": "merge", "state": "done",
                                                                "files": [{"path": "merged/m.gz"}]}, header={})
    manifest.update(b, session_id="s", writer="rank1", section=section("done", 1), header=HEADER)
    data = manifest.write_collected(out, [manifest.read(a), manifest.read(b)], [{"node": 0}, {"node": 1}])
    assert data["state"] == "done" and sorted(data["writers"]) == ["rank0", "rank1"]  # a node's own merge left out
    assert manifest.read(out)["nodes_here"] == [0, 1]
    only_a = manifest.write_collected(tmp_path / "half", [manifest.read(a)], [{"node": 0}])
    assert only_a["state"] == "done" and only_a["nodes_here"] == [0]  # says which node it holds
    with pytest.raises(ValueError, match="different sessions"):
        manifest.write_collected(tmp_path / "x", [manifest.read(a), {**manifest.read(b), "session_id": "t"}], [])


# ---- the lock where flock is refused --------------------------------------------------
def _refusing_flock(*args):
    raise OSError(errno.ENOLCK, "No locks available")  # as NFS without a lock daemon answers


def _writer(folder: str, name: str, n: int) -> None:
    manifest.fcntl.flock = _refusing_flock  # in this child process only
    for k in range(n):
        manifest.update(Path(folder), session_id="s", writer=f"{name}-{k}", section=section("recording", 0),
                        header={"expected_ranks": 0})


def test_updates_are_not_lost_when_the_mount_refuses_flock(tmp_path):
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), f"w{i}", 15)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert len(manifest.read(tmp_path)["writers"]) == 60  # every read-modify-write kept the others'
    assert not (tmp_path / manifest.LOCK_DIR).exists()


def test_a_lock_left_by_a_dead_process_is_taken_over(tmp_path, monkeypatch):
    monkeypatch.setattr(manifest.fcntl, "flock", _refusing_flock)
    monkeypatch.setattr(manifest, "STALE_LOCK_S", 0.2)
    (tmp_path / manifest.LOCK_DIR).mkdir()  # its holder died
    manifest.update(tmp_path, session_id="s", writer="rank0", section=section("done", 0), header={})
    assert manifest.read(tmp_path)["state"] == "done"


# ---- a rank's answers: where it writes, and its files for rlprof collect -------------------
def test_a_rank_reads_back_only_its_own_written_files(tmp_path):
    from rlprof_plugins.session.protocol import combine, file_piece, roster_command
    from rlprof_plugins.errors import NotFoundError
    from rlprof_plugins.backends.torch_profiler import TorchProfilerBackend, TorchSettings
    from rlprof_plugins.session.controller import ProfilerController
    from tests.unit.test_session import run_iterations, settle, start

    ctl = ProfilerController(root_dir=str(tmp_path), worker_name=lambda prefix: "rank0", node=1,
                             backend_factory=lambda table, _overrides=None: TorchProfilerBackend(TorchSettings()),
                             manifest_header={"engine": "test", "expected_ranks": 2, "nodes": 2})
    assert start(ctl, global_step=2, step_end=2)["ok"]
    run_iterations(ctl, 3)
    status = combine([ctl.handle({"op": "status", "global_step": 2})])
    assert status["state"] in ("exporting", "done")
    s = settle(ctl, 2)
    assert s["node"] == 1 and s["host"] and s["state"] == "done"
    assert status["nodes"] == [{"node": 1, "host": s["host"], "directory": s["directory"], "ranks": ["rank0"],
                                "state": status["state"]}]
    written = s["files"][0]
    path = str(Path(written).relative_to(s["directory"]))
    read = {"op": "read", "global_step": 2, "rank": "rank0", "path": path}
    first = file_piece([{"ok": True}, ctl.handle({**read, "length": 100})], "rank0", path)
    rest = ctl.handle({**read, "offset": 100})
    assert first["data"] + rest["data"] == Path(written).read_bytes() and first["size"] == Path(written).stat().st_size
    assert ctl.handle({**read, "rank": "rank1"}) == {"ok": True}  # another rank's: not this one's to answer
    with pytest.raises(NotFoundError, match="no written file"):
        file_piece([ctl.handle({**read, "path": "../../../etc/passwd"})], "rank0", "../../../etc/passwd")
    with pytest.raises(NotFoundError, match="no rank named"):
        file_piece([ctl.handle({**read, "rank": "rank9"})], "rank9", path)
    assert json.loads(ctl.handle({**read, "path": "manifest.json"})["data"])["writers"]["rank0"]["node"] == 1

    # one node: no roster; two nodes: every rank's node, host and folder, into the manifest
    assert roster_command(status) is None
    two = {**status, "ranks": [*status["ranks"], {**status["ranks"][0], "rank": "rank1", "node": 0,
                                                  "directory": "/elsewhere/global_step_2"}]}
    roster = roster_command(two)
    assert ctl.handle(roster) == {"ok": True, "roster": True}
    m = manifest.read(Path(s["directory"]))
    assert m["elsewhere"] == [{"node": 0, "host": s["host"], "directory": "/elsewhere/global_step_2",
                               "ranks": ["rank1"]}]
    Path(written).unlink()  # e.g. pruned by keep_last_steps since
    with pytest.raises(NotFoundError, match="could not read"):
        file_piece([ctl.handle(read)], "rank0", path)
