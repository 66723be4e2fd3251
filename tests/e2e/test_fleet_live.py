"""Two live servers sharing one ``torch_profiler_dir`` never overwrite each other (issue 55), on both engines.

Two real servers (TP=1) are started with the same ``--profiler-config``, as one launch line on a
shared filesystem starts them, and nothing else set: each derives its identity from the host and
its port. A trainer marks RL steps 1..4 on both (``POST /profile_step``), with traffic in each, and
traces step 3 on both. Then: the first server keeps today's layout in the directory, the second
writes below ``servers/<its name>/``; every file of both is on disk and named in its server's
manifest; no step log holds two servers' lines; the status names both servers of step 3; and
``rlprof report`` on the shared directory shows both replicas for every step.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest

from rlprof_plugins.cli.command import main as rlprof
from rlprof_plugins.store.servers import CLAIM, SERVERS_DIR
from tests.helpers import sglang_server
from tests.helpers.vllm_server import start_server as start_vllm, start_together

STEPS = (1, 2, 3, 4)
TRACED = 3


def start_pair(engine: str, tmp: Path, root: Path) -> list:
    """Two servers of ``engine`` on one directory, started at once (a start is mostly one core's imports)."""
    config = {"torch_profiler_dir": str(root), "torch_profiler_with_stack": False,
              **({"profiler": "torch"} if engine == "vllm" else {})}
    starts = {}
    for k in range(2):
        folder = tmp / f"{engine}-{k}"
        folder.mkdir()
        starts[k] = (lambda f=folder: start_vllm(f, config)) if engine == "vllm" else \
            (lambda f=folder: sglang_server.start_server(f, config))
    started = start_together(starts)
    return [started[0], started[1]]


# `make test-extended` (CI's 25 minutes: docs/testing.md): in CI, servers sharing one directory keep their own
# folders and read as replicas in tests/unit/test_fleet_report.py, racing real processes elect one root in
# tests/unit/test_claim.py, and step logs are written live by SGLang's TP=2 server in tests/e2e/test_step_metrics_live.py
pytestmark = pytest.mark.extended


def drive(engine: str, servers: list) -> None:
    """RL steps 1..4 on every server, with traffic in each; step 3 traced on every one."""
    for step in STEPS:
        for server in servers:
            r = server.post("/profile_step", {"global_step": step})
            assert r.status_code == 200 and r.json()["status"] == "marked", r.text
        if step == TRACED:
            for server in servers:
                body = {"global_step": step, **({"num_steps": 3} if engine == "sglang" else {})}
                r = server.post("/start_profile", body)
                assert r.status_code == 200, r.text
        for server in servers:
            for _ in range(2):
                server.complete(max_tokens=4)
        if step == TRACED:
            for server in servers:
                if engine == "vllm":
                    assert server.post("/stop_profile", {}).status_code == 200
                assert server.wait_state()["state"] == "done", server.log()[-3000:]
    for server in servers:  # step 4 ends: its numbers are written when the next step begins
        assert server.post("/profile_step", {"global_step": 5}).status_code == 200


@pytest.fixture(scope="module", params=["vllm", "sglang"])
def fleet(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(f"fleet-{request.param}")
    root = tmp / "shared"
    servers = start_pair(request.param, tmp, root)
    try:
        drive(request.param, servers)
        yield request.param, root, servers
    finally:
        for server in servers:
            server.stop()


def names_of(root: Path) -> tuple[str, str]:
    first = json.loads((root / CLAIM).read_text())["server"]
    (second,) = [p.name for p in (root / SERVERS_DIR).iterdir()]
    return first, second


def wait_for_lines(folder: Path, step: int, timeout: float = 30) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        lines = [json.loads(line) for p in (folder / "steps").glob("*.jsonl") for line in p.read_text().splitlines()]
        if any(r["global_step"] == step for r in lines):
            return
        time.sleep(0.3)


def test_each_server_keeps_its_own_folder_files_manifest_and_step_logs(fleet):
    engine, root, servers = fleet
    first, second = names_of(root)
    assert first != second
    folders = {first: root, second: root / SERVERS_DIR / second}
    for name, folder in folders.items():
        wait_for_lines(folder, 4)
        step = folder / f"global_step_{TRACED}"
        data = json.loads((step / "manifest.json").read_text())
        assert data["state"] == "done" and data["server"] == name
        listed = {f["path"] for w in data["writers"].values() for f in w.get("files", [])}
        on_disk = {str(p.relative_to(step)) for p in step.rglob("*")
                   if p.is_file() and not p.name.startswith(".") and p.name != "manifest.json"}
        assert on_disk and on_disk <= listed, (on_disk - listed)
        assert any(p.startswith("ranks/") for p in listed)
        logs = list((folder / "steps").glob("*.jsonl"))
        assert logs
        for log in logs:  # one server's lines only: every record's rank is this log's, steps never repeat
            records = [json.loads(line) for line in log.read_text().splitlines()]
            assert {r["rank"] for r in records} == {log.name.removesuffix(".jsonl")}
            numbered = [r["global_step"] for r in records if r["global_step"] is not None]
            assert len(numbered) == len(set(numbered)) and set(STEPS) <= set(numbered), numbered
    # the second server wrote nothing of its own into the first's folders
    assert not (root / SERVERS_DIR / first).exists()


def test_the_status_names_both_servers_of_the_traced_step(fleet):
    engine, root, servers = fleet
    status = servers[1].get(f"/profile_status?global_step={TRACED}").json()
    assert sorted(s["server"] for s in status["servers"]) == sorted(names_of(root)), status
    assert all(s["state"] == "done" for s in status["servers"])


def test_the_report_on_the_shared_directory_shows_both_replicas_for_every_step(fleet, tmp_path):
    engine, root, servers = fleet
    out = tmp_path / "fleet.json"
    assert rlprof(["report", str(root), "-q", "--no-cache", "--json", str(out), "-o", str(tmp_path / "r.html")]) == 0
    data = json.loads(out.read_text())
    assert sorted(data["replicas"]) == sorted(names_of(root))
    by_step = {s["global_step"]: s for s in data["steps"]}
    assert set(STEPS) <= set(by_step), sorted(by_step, key=str)
    for step in STEPS:
        assert sorted(r["name"] for r in by_step[step]["replicas"]) == sorted(names_of(root)), step
        assert by_step[step]["slowest_replica"] in names_of(root)
    assert by_step[TRACED]["traced"] and all(r["traced"] for r in by_step[TRACED]["replicas"])


# ---- one name on two hosts ------------------------------------------------------------------------------
SECOND_HOST = "rlprof-node-b"


@pytest.fixture(scope="module")
def one_name_two_hosts(tmp_path_factory):
    """Two vLLM servers given one name (``RLPROF_SERVER_NAME`` set for both, as a cluster-wide variable sets
    it) on one shared folder, the second on "another host": its own UTS namespace with its own hostname
    (``unshare --uts``, which needs root), the one thing two nodes differ in that the claim reads first."""
    import shutil
    import subprocess

    from tests.helpers.vllm_server import VllmServer, cpu_env, free_port, launch, server_command

    if subprocess.run(["unshare", "--uts", "true"], capture_output=True).returncode != 0 or not shutil.which("unshare"):
        pytest.skip("no UTS namespace here (unshare --uts needs root): the second host cannot be stood for")
    tmp = tmp_path_factory.mktemp("one-name")
    root = tmp / "shared"
    config = {"profiler": "torch", "torch_profiler_dir": str(root), "torch_profiler_with_stack": False}
    env = {"RLPROF_SERVER_NAME": "rollout"}
    starts = {}
    for k in range(2):
        folder = tmp / f"host-{k}"
        folder.mkdir()
        port = free_port()
        command = server_command(port, config)
        if k == 1:
            command = ["unshare", "--uts", "sh", "-c", f'hostname {SECOND_HOST} && exec "$@"', "sh", *command]
        starts[k] = (lambda f=folder, p=port, c=command: launch(VllmServer, "vLLM", f, f / f"server-{p}.log", p, c,
                                                                cpu_env(**env), config, 240))
    started = start_together(starts)
    servers = [started[0], started[1]]
    try:
        drive("vllm", servers)
        yield root, servers
    finally:
        for server in servers:
            server.stop()


def test_one_name_on_two_hosts_is_two_replicas_each_with_its_own_files(one_name_two_hosts, tmp_path):
    root, servers = one_name_two_hosts
    holder = json.loads((root / CLAIM).read_text())
    assert holder["server"] == "rollout"
    (below,) = [p for p in (root / SERVERS_DIR).iterdir()]
    other_host = SECOND_HOST if holder["host"] != SECOND_HOST else socket.gethostname()
    assert below.name.startswith(f"rollout.{other_host.split('.')[0]}-pid"), below
    logs = "".join(s.log() for s in servers)
    warned = [line for line in logs.splitlines() if "two servers were given the name 'rollout'" in line]
    assert warned and SECOND_HOST in warned[0] and socket.gethostname() in warned[0], warned
    for folder in (root, below):  # both sessions in their manifests, every listed file on disk
        wait_for_lines(folder, 4)
        step = folder / f"global_step_{TRACED}"
        data = json.loads((step / "manifest.json").read_text())
        assert data["state"] == "done" and data["writers"], data
        listed = {f["path"] for w in data["writers"].values() for f in w.get("files", [])}
        assert any(p.startswith("ranks/") for p in listed)
        assert all((step / p).is_file() for p in listed), [p for p in listed if not (step / p).is_file()]
    out = tmp_path / "fleet.json"
    assert rlprof(["report", str(root), "-q", "--no-cache", "--json", str(out), "-o", str(tmp_path / "r.html")]) == 0
    data = json.loads(out.read_text())
    assert len(data["replicas"]) == 2, data["replicas"]
    by_step = {s["global_step"]: s for s in data["steps"]}
    assert len(by_step[TRACED]["replicas"]) == 2 and all(r["traced"] for r in by_step[TRACED]["replicas"])
