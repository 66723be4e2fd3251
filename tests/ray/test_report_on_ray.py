"""``rlprof report ROOT --ray`` and ``summary --ray`` on a real Ray cluster (issue 70).

Nodes are Ray's own (``ray.cluster_utils.Cluster``, Ray 2.60 from verl's test
folder: ``tests/helpers/ray_cluster.py``), several on this machine, all on
``127.0.0.2``; each node keeps its traces in a folder only it is told of
(``FLEET_NODE`` in its environment, ROOT written as ``.../$FLEET_NODE/save_path``),
so a trace can only be read on the node that holds it. The traces are verl's
replica layout built from real vLLM TP=2 traces (``test_fleet_report``).

In ``make test``: without Ray, exit 2 and one line naming the extra; one node
giving the local report's JSON (report and summary) for a ROOT named with
quotes, ``&``, ``<>`` and spaces, its node cache on the second run, no Ray
connection off the loopback, a 30 MB flight recorder window read on its node
with under 1% of the bytes read coming back, and (``summary`` called in a Python process,
which joins the cluster as a Ray driver) that process's streams, exception
hook and fault handler left as they were. In ``make test-extended``
(each starts a cluster of its own): three nodes holding a replica each give the
local report's steps, replicas, slowest replica and rank times; a step whose ranks lie on two nodes
is read whole; a filesystem
all nodes share is read once, spread over them; a node whose CPU a trainer's
actor holds still runs the passes; passes still queued at ``--timeout`` are
named unread and the report is made; a corrupt trace, a node that
cannot import rlprof (named, with the mend) and a node killed mid-report are
each named by file or node, with a non-zero exit within the timeout; a node of another rlprof release
is named and read, and one whose plan or answers are in a shape this release cannot read is named (the
node, or each file by node) while the others are read; an address that takes connections and is no cluster ends
within the timeout (one where nothing answers: at once, in ``make test``).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.loopback import Connections, ss_available
from tests.helpers.ray_cluster import RAY_PATH, RayCluster, comparable, ray_environment
from tests.helpers.synthetic_traces import write_rank_trace
from tests.unit.test_fleet_report import FIXTURE, REPLICAS, copy_step, stretch
from tests.unit.test_report_on_ray_parts import AWKWARD, spanning_two_nodes
from tests.verl import site

RLPROF = Path(sys.executable).parent / "rlprof"
NODE_ROOT = "$FLEET_NODE/save_path"  # below a test's base folder: each node's own

pytestmark = pytest.mark.skipif(not site.installed(), reason="Ray comes with verl's test folder: make env")


def fleet(base: Path, nodes: list[str]) -> Path:
    """verl's layout (three replicas, steps 5 and 6, replica 1's step 6 1.6x slower) under ``base/all``, and
    replica ``i`` copied to ``base/<nodes[i % len(nodes)]>``; returns the whole root (the local run's)."""
    whole = base / "all" / "save_path"
    for replica in REPLICAS:
        for step in (5, 6):
            copy_step(FIXTURE, whole / replica / f"global_step_{step}", step)
    stretch(whole / REPLICAS[1] / "global_step_6", 1.6)
    for i, replica in enumerate(REPLICAS):
        shutil.copytree(whole / replica, base / nodes[i % len(nodes)] / "save_path" / replica,
                        copy_function=shutil.copy2)  # the same times: the same files as the local root's
    return whole


def large_flight_dump(replica: Path, step: int, mb: int) -> Path:
    """A real flight recorder dump in ``replica``'s step ``step`` (its step logs beside), its rank's window
    padded to about ``mb`` MB of random text: what a busy server's dump weighs. Returns the window."""
    from tests.unit.test_flight_recorder import dumps, iterate, recorder

    r = recorder(replica, step=step)
    iterate(r, 30)
    r.flight_dump("20261127-000000-requested-001")
    dumps(replica)
    r.close()
    window = next((replica / f"global_step_{step}" / "flight").glob("*/*.flight.json"))
    trace = json.loads(window.read_text())
    events = trace["traceEvents"]
    each = mb * (1 << 20) // max(len(events), 1)
    for event in events:  # random text: what the listing would carry of it, compressed, is all of it
        event.setdefault("args", {})["pad"] = os.urandom(each // 2).hex()
    window.write_text(json.dumps(trace))
    return window


def run(args: list[str], cwd: Path, *, ray: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    env = ray_environment() if ray else {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(RLPROF), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def report_json(root: str, cwd: Path, name: str, *ray: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = cwd / f"{name}.json"
    done = run(["report", root, "--json", str(out), "-o", str(cwd / f"{name}.html"), *ray], cwd)
    return done, json.loads(out.read_text()) if out.exists() else {}


def report_killing(cluster: RayCluster, root: str, node: str, cwd: Path, timeout: float) -> tuple[int, str, float]:
    """``rlprof report ROOT --ray`` (JSON to ``cwd/ray.json``), with ``node`` killed once the passes are under
    way: its exit status, what it said, and the seconds from the kill to its end."""
    driver = subprocess.Popen([str(RLPROF), "report", root, "--ray", cluster.address, "--timeout", str(timeout),
                               "--json", str(cwd / "ray.json"), "-o", str(cwd / "ray.html")],
                              cwd=cwd, env=ray_environment(), stderr=subprocess.PIPE, text=True)
    said = []
    for line in driver.stderr:
        said.append(line)
        if "reading each where it lies" in line:
            break
    started = time.monotonic()
    cluster.remove(node)
    said.append(driver.stderr.read())
    rc = driver.wait(timeout=timeout + 60)
    return rc, "".join(said), time.monotonic() - started


# ``rlprof summary --ray`` called in a Python process whose streams are objects of its own (no file behind
# them), watched while it runs: they must stay in place while Ray joins from this process, and Ray's exception
# hook and fault handler must be gone once it has left.
IN_PROCESS = """
import json, sys, threading, time
from rlprof_plugins.cli.command import main

class Kept:
    def __init__(self):
        self.text = []
    def write(self, text):
        self.text.append(text)
        return len(text)
    def flush(self):
        pass

out, err, replaced, running = Kept(), Kept(), [], True
def watch():
    while running:
        if sys.stdout is not out or sys.stderr is not err:
            replaced.append(repr((sys.stdout, sys.stderr)))
        time.sleep(0.002)
sys.stdout, sys.stderr = out, err
watcher = threading.Thread(target=watch)
watcher.start()
hook = sys.excepthook
rc = main(sys.argv[1:])
running = False
watcher.join()
import faulthandler
sys.__stdout__.write(json.dumps({"rc": rc, "replaced": replaced[:3], "ray_imported": "ray" in sys.modules,
                                 "hook_kept": sys.excepthook is hook, "fault_handler": faulthandler.is_enabled(),
                                 "out": "".join(out.text), "err": "".join(err.text)}))
"""


def loopback_only(connections: Connections) -> None:
    assert connections.lines, "ss saw no connection of the cluster or the driver: the check checked nothing"
    assert not connections.elsewhere, f"Ray connections off the loopback: {connections.elsewhere}"


def test_without_ray_report_and_summary_exit_2_with_one_line_naming_the_extra(tmp_path):
    root = fleet(tmp_path, ["node0"])
    for command in (["report", str(root), "-o", str(tmp_path / "r.html")], ["summary", str(root)]):
        done = run([*command, "--ray"], tmp_path, ray=False)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "rlprof-plugins[ray]" in lines[0], done.stderr
        assert not (tmp_path / "r.html").exists()


def test_ray_is_imported_by_the_command_with_ray_alone_never_by_the_plugins(tmp_path):
    """With Ray importable, the engines' plugins, the CLI and even the ``--ray`` modules load without it."""
    modules = ("rlprof_plugins.entry_points.vllm", "rlprof_plugins.entry_points.sglang", "rlprof_plugins.cli.command",
               "rlprof_plugins.cli.report_command", "rlprof_plugins.cli.trace_commands",
               "rlprof_plugins.report.execute.on_ray.driver", "rlprof_plugins.report.execute.on_ray.node")
    code = (f"import sys, {', '.join(modules)}; assert 'ray' not in sys.modules, 'Ray imported'; "
            "import ray; print('ok')")  # Ray was there to import all along
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=ray_environment(), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_an_address_where_nothing_answers_exits_1_at_once(tmp_path):
    root = fleet(tmp_path, ["node0"])
    with socket.socket() as s:
        s.bind(("127.0.0.2", 0))
        port = s.getsockname()[1]  # bound, never listening: refused
    started = time.monotonic()
    done = run(["report", str(root), "--ray", f"127.0.0.2:{port}", "-o", str(tmp_path / "r.html")], tmp_path)
    assert done.returncode == 1 and "no Ray cluster to join" in done.stderr and "refused" in done.stderr
    assert time.monotonic() - started < 30 and not (tmp_path / "r.html").exists()


@pytest.mark.extended
def test_an_address_that_takes_connections_but_is_no_cluster_ends_within_the_timeout(tmp_path):
    """``ray.init`` waits on such an address with no end of its own: ``--timeout`` ends it."""
    root = fleet(tmp_path, ["node0"])
    with socket.socket() as s:
        s.bind(("127.0.0.2", 0))
        s.listen(64)  # takes connections, answers nothing
        started = time.monotonic()
        done = run(["report", str(root), "--ray", "127.0.0.2:%d" % s.getsockname()[1], "--timeout", "8",
                    "-o", str(tmp_path / "r.html")], tmp_path, timeout=120)
    assert done.returncode == 1 and "did not answer within --timeout 8 s" in done.stderr
    assert time.monotonic() - started < 40


@pytest.mark.skipif(not ss_available(), reason="needs ss (iproute2)")
def test_one_node_gives_the_local_json_keeps_its_cache_and_stays_on_the_loopback(tmp_path):
    """ROOT named as users name folders (quotes, ``&``, ``<>``, spaces): shown as written, read the same;
    a flight recorder's 30 MB window is read by its pass on the node, and only summaries come back."""
    root = fleet(tmp_path / AWKWARD, ["node0"])
    window = large_flight_dump(root / REPLICAS[1], 6, 30)  # the slowest replica of step 6: its row
    local, local_json = report_json(str(root), tmp_path, "local", "--no-cache")  # leaves the cache of passes empty
    assert local.returncode == 0, local.stderr
    with RayCluster({"head": {}}, tmp_path) as cluster, Connections(cluster.proc.pid, os.getpid()) as seen:
        first, on_ray = report_json(str(root), tmp_path, "ray", "--ray", cluster.address)
        second, again = report_json(str(root), tmp_path, "again", "--ray", cluster.address)
        in_process = subprocess.run([sys.executable, "-c", IN_PROCESS, "summary", str(root), "--json", "--ray",
                                     cluster.address], cwd=tmp_path, env=ray_environment(), capture_output=True,
                                    text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert comparable(on_ray) == comparable(local_json) and on_ray["root"] == local_json["root"] == str(root)
    traces = local_json["analysis"]["traces_per_node"]
    a = on_ray["analysis"]
    assert a["engine"] == "ray" and len(a["nodes"]) == 1
    # 3 replicas x 2 steps x 2 ranks, and the dump's window
    assert sum(a["traces_per_node"].values()) == sum(traces.values()) == 13
    assert a["trace_bytes"] == local_json["analysis"]["trace_bytes"] > window.stat().st_size > 30e6
    assert 0 < a["bytes_returned"] < 0.01 * a["trace_bytes"]  # summaries and small files alone
    assert [len(s["anomalies"]) for s in on_ray["steps"] if s["global_step"] == 6] == [1]
    assert a["node_cache_hits"] == 0 and again["analysis"]["node_cache_hits"] == 13
    assert comparable(again) == comparable(local_json)
    assert in_process.returncode == 0, in_process.stderr
    summary = json.loads(in_process.stdout)
    assert summary["rc"] == 0, summary["err"]
    assert summary["replaced"] == [] and summary["ray_imported"]  # joined from this process
    assert summary["hook_kept"] and not summary["fault_handler"]
    local_summary = run(["summary", str(root), "--json"], tmp_path, ray=False)
    assert comparable(json.loads(summary["out"])) == comparable(json.loads(local_summary.stdout))
    loopback_only(seen)


@pytest.mark.extended
def test_three_nodes_each_holding_a_replica_give_the_local_steps_replicas_slowest_and_rank_times(tmp_path):
    nodes = ["node0", "node1", "node2"]
    root = fleet(tmp_path, nodes)
    local, local_json = report_json(str(root), tmp_path, "local")
    spec = {name: {"env": {"FLEET_NODE": name}} for name in nodes}
    with RayCluster(spec, tmp_path) as cluster, Connections(cluster.proc.pid, os.getpid()) as seen:
        done, on_ray = report_json(f"{tmp_path}/{NODE_ROOT}", tmp_path, "ray", "--ray", cluster.address)
    assert done.returncode == 0, done.stderr
    assert comparable(on_ray) == comparable(local_json)
    steps = {s["global_step"]: s for s in on_ray["steps"]}
    assert sorted(steps) == [5, 6] and steps[6]["slowest_replica"] == REPLICAS[1]
    assert all(sorted(r["name"] for r in s["replicas"]) == REPLICAS for s in steps.values())
    assert steps[6]["rank_time"] == {s["global_step"]: s for s in local_json["steps"]}[6]["rank_time"]
    a = on_ray["analysis"]
    assert len(a["nodes"]) == 3 and sorted(a["traces_per_node"].values()) == [4, 4, 4]
    loopback_only(seen)


@pytest.mark.extended
def test_a_step_whose_ranks_lie_on_two_nodes_is_read_whole(tmp_path):
    """A TP=2 server spanning two nodes, each writing its rank into a step folder of its own disk: the report
    on Ray reads each rank on its node and gives the local report of the folder holding both."""
    _, _, whole = spanning_two_nodes(tmp_path)
    local, local_json = report_json(str(whole), tmp_path, "local")
    spec = {name: {"env": {"FLEET_NODE": name}} for name in ("node-a", "node-b")}
    with RayCluster(spec, tmp_path) as cluster:
        done, on_ray = report_json(f"{tmp_path}/$FLEET_NODE", tmp_path, "ray", "--ray", cluster.address)
    assert done.returncode == 0, done.stderr
    assert comparable(on_ray) == comparable(local_json)
    (step,) = on_ray["steps"]
    assert step["ranks"] == ["rank0", "rank1"] and not step["missing_ranks"] and step["iterations"] > 0
    assert sorted(on_ray["analysis"]["traces_per_node"].values()) == [1, 1]


@pytest.mark.extended
def test_a_filesystem_every_node_shares_is_read_once_spread_over_the_nodes(tmp_path):
    root = fleet(tmp_path, ["node0"])
    local, local_json = report_json(str(root), tmp_path, "local")
    with RayCluster({n: {} for n in ("head", "a", "b")}, tmp_path) as cluster:
        done, on_ray = report_json(str(root), tmp_path, "ray", "--ray", cluster.address)
    assert done.returncode == 0, done.stderr
    assert comparable(on_ray) == comparable(local_json)
    a = on_ray["analysis"]
    assert sum(a["traces_per_node"].values()) == 12 and len(a["nodes"]) >= 2


@pytest.mark.extended
def test_passes_run_on_a_node_whose_cpus_the_trainer_holds(tmp_path):
    """A trainer's actors hold the node's one CPU: the report's passes ask Ray for none, so they still run."""
    root = fleet(tmp_path, ["node0"])
    local, local_json = report_json(str(root), tmp_path, "local")
    with RayCluster({"head": {"held_by_trainer": True}}, tmp_path) as cluster:
        done, on_ray = report_json(str(root), tmp_path, "ray", "--ray", cluster.address, "--timeout", "60")
    assert done.returncode == 0, done.stderr
    assert comparable(on_ray) == comparable(local_json)
    assert on_ray["analysis"]["unread"] == [] and sum(on_ray["analysis"]["traces_per_node"].values()) == 12


@pytest.mark.extended
def test_passes_still_queued_at_the_timeout_are_named_unread_and_the_read_ones_kept(tmp_path):
    """A 1-CPU node reads one pass at a time; with more large traces than it reads before ``--timeout``,
    those never sent and the one cut off are each named unread with the timeout; the report is still made."""
    root = fleet(tmp_path, ["node0"])
    big = root / REPLICAS[1] / "global_step_7" / "ranks"
    big.mkdir(parents=True)
    for rank in range(8):  # 2 to 4 s a pass here, read first (the largest first): far past the timeout
        write_rank_trace(big / f"rank{rank}.10{rank}.pt.trace.json.gz", rank=rank, iterations=60000)
    with RayCluster({"head": {}}, tmp_path) as cluster:
        started = time.monotonic()
        done, on_ray = report_json(str(root), tmp_path, "ray", "--ray", cluster.address, "--timeout", "10")
        took = time.monotonic() - started
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    unread = on_ray["analysis"]["unread"]
    assert unread and all("no answer within --timeout 10 s" in u["reason"] for u in unread), unread
    assert any("global_step_7" in u["path"] for u in unread)
    assert took < 10 + 10 + 60  # the listing's and the passes' deadlines, and the report


@pytest.mark.extended
def test_a_corrupt_trace_a_node_without_rlprof_and_one_of_another_release_are_named_by_file_and_node(tmp_path):
    nodes = ["node0", "node1", "node2"]
    fleet(tmp_path, nodes)
    corrupt = next((tmp_path / "node1" / "save_path" / REPLICAS[1] / "global_step_5" / "ranks").glob("rank1.*"))
    corrupt.write_bytes(corrupt.read_bytes()[: corrupt.stat().st_size // 2])  # cut short mid-stream
    shim = tmp_path / "no-rlprof" / "rlprof_plugins"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('rlprof is not installed on this node')\n")
    # node0 runs another release: the installed package, copied, its version changed
    import rlprof_plugins

    other = tmp_path / "other-release" / "rlprof_plugins"
    shutil.copytree(Path(rlprof_plugins.__file__).parent, other, ignore=shutil.ignore_patterns("__pycache__"))
    init = other / "__init__.py"
    init.write_text(init.read_text().replace(f'__version__ = "{rlprof_plugins.__version__}"', '__version__ = "0.1.99"'))
    assert '"0.1.99"' in init.read_text()
    spec = {"node0": {"env": {"FLEET_NODE": "node0", "PYTHONPATH": f"{other.parent}{os.pathsep}{RAY_PATH}"}},
            "node1": {"env": {"FLEET_NODE": "node1"}},
            "node2": {"env": {"FLEET_NODE": "node2", "PYTHONPATH": f"{shim.parent}{os.pathsep}{RAY_PATH}"}}}
    with RayCluster(spec, tmp_path) as cluster:
        done, on_ray = report_json(f"{tmp_path}/{NODE_ROOT}", tmp_path, "ray", "--ray", cluster.address,
                                   "--timeout", "120")
    assert done.returncode == 1, done.stderr
    a = on_ray["analysis"]
    assert len(a["faults"]) == 1 and "cannot run rlprof" in a["faults"][0] and "not installed" in a["faults"][0]
    unread = {u["path"]: u for u in a["unread"]}
    assert str(corrupt.relative_to(tmp_path / "node1" / "save_path")) in unread  # with the node that read it
    # node2 cannot import rlprof: named with what it said and how to mend it; what it holds is not read
    broken_node = a["faults"][0].split()[1].rstrip(":")  # "node <ip>/<id>: cannot run rlprof (...)"
    assert "install rlprof-plugins there" in a["faults"][0] and broken_node not in a["nodes"]
    assert not any(path.startswith(REPLICAS[2]) for path in unread)
    notes = "\n".join(on_ray["notes"])
    assert corrupt.name in notes and broken_node in notes
    (older, version), = a["versions"].items()  # node0, named with its release; its passes still read
    assert version == "0.1.99" and f"node {older} runs rlprof 0.1.99" in notes and older in a["nodes"]
    steps = {s["global_step"]: s for s in on_ray["steps"]}  # what the other nodes read is kept
    assert {r["name"] for r in steps[5]["replicas"]} == {REPLICAS[0], REPLICAS[1]}
    assert all(r["iterations"] > 0 for s in steps.values() for r in s["replicas"] if r["name"] == REPLICAS[0])


def release_copy(base: Path, version: str, edits: list[tuple[str, str, str]]) -> Path:
    """The installed rlprof copied below ``base`` as release ``version``, each ``(module, text, new text)``
    edit made in it (each must apply): a node of another release whose wire differs. Returns its folder."""
    import rlprof_plugins

    other = base / f"release-{version}" / "rlprof_plugins"
    shutil.copytree(Path(rlprof_plugins.__file__).parent, other, ignore=shutil.ignore_patterns("__pycache__"))
    for module, text, new in [("__init__.py", f'__version__ = "{rlprof_plugins.__version__}"',
                               f'__version__ = "{version}"'), *edits]:
        path = other / module
        assert text in path.read_text(), (module, text)
        path.write_text(path.read_text().replace(text, new))
    return other.parent


@pytest.mark.extended
def test_a_node_whose_release_plans_or_answers_in_another_shape_is_named_and_the_others_read(tmp_path):
    """node1's release sends its servers as plain data (named in ``faults`` with the release to install; what
    it holds is not read); node2's answers each trace's summary as plain data (each such file unread, by node).
    The report keeps what node0 read, and exits 1."""
    nodes = ["node0", "node1", "node2"]
    fleet(tmp_path, nodes)
    node = "report/execute/on_ray/node.py"
    plans_apart = release_copy(tmp_path, "0.1.98", [(node, "return pack(out)",
                                                     'return pack({**out, "servers": [vars(s) for s in out["servers"]]})')])
    answers_apart = release_copy(tmp_path, "0.1.97", [(node, "return pack(stats), cached",
                                                       "return pack(vars(stats)), cached")])
    spec = {"node0": {"env": {"FLEET_NODE": "node0"}},
            "node1": {"env": {"FLEET_NODE": "node1", "PYTHONPATH": f"{plans_apart}{os.pathsep}{RAY_PATH}"}},
            "node2": {"env": {"FLEET_NODE": "node2", "PYTHONPATH": f"{answers_apart}{os.pathsep}{RAY_PATH}"}}}
    with RayCluster(spec, tmp_path) as cluster:
        done, on_ray = report_json(f"{tmp_path}/{NODE_ROOT}", tmp_path, "ray", "--ray", cluster.address,
                                   "--timeout", "120")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    a = on_ray["analysis"]
    (fault,) = a["faults"]
    assert "its plan cannot be read by rlprof" in fault and "install rlprof-plugins" in fault, fault
    unread = a["unread"]
    assert unread and all("its answer cannot be read by rlprof" in u["reason"] for u in unread), unread
    assert {u["path"].split("/")[0] for u in unread} == {REPLICAS[2]} and len({u["node"] for u in unread}) == 1
    steps = {s["global_step"]: s for s in on_ray["steps"]}
    read = {r["name"]: r for s in steps.values() for r in s["replicas"]}
    assert REPLICAS[1] not in read  # node1's replica: not planned, so not read
    assert all(r["iterations"] > 0 for s in steps.values() for r in s["replicas"] if r["name"] == REPLICAS[0])


@pytest.mark.extended
def test_a_node_killed_mid_report_is_named_and_the_report_ends_within_its_timeout(tmp_path):
    fleet(tmp_path, ["node0", "node1"])
    big = tmp_path / "node1" / "save_path" / REPLICAS[1] / "global_step_7" / "ranks"
    big.mkdir(parents=True)
    for rank in range(4):  # about 1.5 s a pass: node1's 1 CPU is still reading these when it is killed
        write_rank_trace(big / f"rank{rank}.10{rank}.pt.trace.json.gz", rank=rank, iterations=20000)
    spec = {"node0": {"env": {"FLEET_NODE": "node0"}}, "node1": {"env": {"FLEET_NODE": "node1"}}}
    timeout = 60
    out = tmp_path / "ray.json"
    with RayCluster(spec, tmp_path) as cluster:
        rc, said, took = report_killing(cluster, f"{tmp_path}/{NODE_ROOT}", "node1", tmp_path, timeout)
    assert rc == 1, said
    assert took < timeout + 30
    data = json.loads(out.read_text())
    a = data["analysis"]
    killed = {u["node"] for u in a["unread"]}
    assert len(killed) == 1 and any("global_step_7" in u["path"] for u in a["unread"]), a["unread"]
    notes = "\n".join(data["notes"])
    assert "not read on node" in notes and next(iter(killed)) in notes
    steps = {s["global_step"]: s for s in data["steps"]}
    assert steps[5]["replicas"] and REPLICAS[0] in {r["name"] for r in steps[5]["replicas"]}


@pytest.mark.extended
def test_a_node_killed_while_reading_a_shared_filesystem_leaves_its_passes_to_another_holder(tmp_path):
    """Every node holds the same root (a shared filesystem); the one reading the big traces is killed
    mid-report. Its passes go to the other live node, which holds the same files: the report exits 0, nothing
    is unread, the notes say which node went away and which read instead, and the steps are the local
    report's."""
    root = fleet(tmp_path, ["node0"])
    big = root / REPLICAS[1] / "global_step_7" / "ranks"
    big.mkdir(parents=True)
    for rank in range(4):  # about 1.5 s a pass: a node is still reading them when it is killed
        write_rank_trace(big / f"rank{rank}.10{rank}.pt.trace.json.gz", rank=rank, iterations=20000)
    local, local_json = report_json(str(root), tmp_path, "local")
    assert local.returncode == 0, local.stderr
    timeout = 120
    with RayCluster({"head": {}, "a": {}, "b": {}}, tmp_path) as cluster:
        # a worker node (the head keeps the cluster): it holds passes as every node does
        rc, said, _took = report_killing(cluster, str(root), "a", tmp_path, timeout)
    assert rc == 0, said
    data = json.loads((tmp_path / "ray.json").read_text())
    a = data["analysis"]
    assert a["unread"] == [] and sum(a["traces_per_node"].values()) == 16, a
    went = [n for n in data["notes"] if "went away while reading it" in n]
    assert went and all("read on node" in n for n in went), data["notes"]
    assert comparable(data)["steps"] == comparable(local_json)["steps"]
