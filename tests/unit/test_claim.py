"""One root per shared output directory (``store/claim.py``), proven under a race.

Real processes race for one folder (forked, released together by a barrier, each kept alive until every one
has its answer, as the servers of one launch line are): exactly one holds the root every time, every one
agrees which, with ``flock`` and without it, for an empty folder and for one whose claimant has ended.
Liveness: the claimant's process where this host can see it, a lease elsewhere (another host, another pid
namespace on this host). Every wait ends."""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from rlprof_plugins.store import claim, processes, servers

CTX = multiprocessing.get_context("fork")
# Bounds for a hang, not timings: every wait ends, none is a race against the clock. Eight forked processes
# reach the start barrier within a second on a quiet host; beside two vLLM servers on this 2-core machine one
# took over 30 s (the barrier's old bound, which broke the race for all eight).
HANG_S = 600


def _contender(root: str, name: str, start, done, answers) -> None:
    start.wait(HANG_S)
    answers.put((name, servers.claimant(Path(root), name)))
    done.wait(HANG_S)  # alive until every contender has answered: no claim is seen ended mid-race


def race(root: Path, contenders: int) -> list[tuple[str, str | None]]:
    start, done, answers = CTX.Barrier(contenders), CTX.Barrier(contenders + 1), CTX.Queue()
    procs = [CTX.Process(target=_contender, args=(str(root), f"server-{k}", start, done, answers))
             for k in range(contenders)]
    for p in procs:
        p.start()
    got = [answers.get(timeout=2 * HANG_S) for _ in procs]
    done.wait(HANG_S)
    for p in procs:
        p.join(HANG_S)
        assert p.exitcode == 0
    return got


def one_root(got: list[tuple[str, str | None]]) -> str:
    """Exactly one contender holds the root, and every other one names it as the holder (or could not decide:
    it writes below ``servers/``, never a second root)."""
    winners = [name for name, holder in got if holder == name]
    assert len(winners) == 1, got
    assert all(holder in (winners[0], None) for _, holder in got), got
    return winners[0]


@pytest.mark.parametrize("locking", ["flock", "no flock"])
def test_racing_servers_elect_exactly_one_root_every_time(tmp_path, monkeypatch, locking):
    if locking == "no flock":  # a mount that refuses flock: the exclusive create alone decides
        import fcntl

        def refused(*_):
            raise OSError(37, "No locks available")

        monkeypatch.setattr(fcntl, "flock", refused)
    winners = set()
    for round_ in range(50):  # each number of servers from 2 to 8 seven times
        root = tmp_path / f"race-{round_}"
        got = race(root, 2 + round_ % 7)  # 2 to 8 servers
        winners.add(one_root(got))
        assert json.loads((root / claim.CLAIM).read_text())["server"] in winners
    assert len(winners) > 1  # not one fixed winner: a race each time


def _ended_claim(root: Path, name: str = "ended-8000") -> None:
    """A claim written by a process of this host that has ended (its pid gone)."""
    done = subprocess.run(["true"])
    assert done.returncode == 0
    pid = int(subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True).stdout)
    root.mkdir(parents=True, exist_ok=True)
    (root / claim.CLAIM).write_text(json.dumps({
        "server": name, "host": socket.gethostname(), "boot": processes.boot_id(), "pidns": processes.pid_namespace(),
        "pid": pid, "started": 1, "id": "ended", "claimed_at": 0}))


def test_racing_servers_take_an_ended_claim_over_exactly_once(tmp_path):
    for round_ in range(30):
        root = tmp_path / f"ended-{round_}"
        _ended_claim(root)
        winner = one_root(race(root, 2 + round_ % 7))
        assert json.loads((root / claim.CLAIM).read_text())["server"] == winner
        assert not [p for p in root.iterdir() if ".ended." in p.name or p.name.endswith(".tmp")]


def test_a_claim_of_another_host_or_pid_namespace_holds_while_its_lease_is_renewed(tmp_path, monkeypatch):
    for where in ({"host": "another-host"}, {"pidns": "pid:[1]"}):  # containers on host networking share a name
        root = tmp_path / next(iter(where))
        root.mkdir()
        path = root / claim.CLAIM
        path.write_text(json.dumps({"server": "theirs", "host": socket.gethostname(), "boot": processes.boot_id(),
                                    "pidns": processes.pid_namespace(), "pid": 1, "id": "x", **where}))
        assert servers.claimant(root, "mine") == "theirs"  # just touched: its lease runs
        old = time.time() - claim.LEASE_S - 60
        os.utime(path, (old, old))  # no renewal for longer than the lease: that server has ended
        assert servers.claimant(root, "mine") == "mine"


def test_the_holder_renews_its_lease(tmp_path, monkeypatch):
    monkeypatch.setattr(claim, "LEASE_S", 0.4)
    root = tmp_path / "renewed"
    assert servers.claimant(root, "renewing") == "renewing"  # the holder's process starts renewing
    old = time.time() - 100
    os.utime(root / claim.CLAIM, (old, old))
    deadline = time.monotonic() + 30
    while time.time() - (root / claim.CLAIM).stat().st_mtime > 50 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert time.time() - (root / claim.CLAIM).stat().st_mtime < 50


def test_a_lock_held_too_long_leaves_the_server_below_not_a_second_root(tmp_path, monkeypatch):
    import fcntl

    monkeypatch.setattr(claim, "LOCK_WAIT_S", 0.2)
    root = tmp_path / "locked"
    _ended_claim(root)  # a takeover needs the lock
    with open(root / claim.LOCK, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another server holds it (and hangs)
        assert servers.claimant(root, "waiting") is None  # undecided in time
        assert servers.server_root(root, "waiting") == root / servers.SERVERS_DIR / "waiting"
    assert json.loads((root / claim.CLAIM).read_text())["server"] == "ended-8000"  # untouched


def test_an_unreadable_claim_counts_as_held(tmp_path):
    root = tmp_path / "torn"
    root.mkdir()
    (root / claim.CLAIM).write_text('{"server": "half')  # never written so by rlprof: a foreign or torn file
    assert servers.claimant(root, "mine") is None
    assert (root / claim.CLAIM).read_text() == '{"server": "half'


def _live_other_process_claim(root: Path, name: str) -> subprocess.Popen:
    """A claim of ``name`` written on this host by another live process (a second server given one name)."""
    other = subprocess.Popen(["sleep", "600"])
    ident = processes.identity_of(other.pid)
    root.mkdir(parents=True, exist_ok=True)
    (root / claim.CLAIM).write_text(json.dumps({"server": name, **ident, "pidns": processes.pid_namespace(),
                                                "id": "theirs"}))
    return other


def test_two_servers_given_one_name_never_both_hold_the_root(tmp_path, caplog):
    """take() checks who wrote the claim, not only its name: a live process of this host holds it under the
    same name, so this server is told so and writes below a folder of its own."""
    import logging

    root = tmp_path / "one-name"
    other = _live_other_process_claim(root, "rollout")
    try:
        assert claim.take(root, "rollout") == claim.Holder("rollout", False)
        assert servers.claimant(root, "rollout") is None
        with caplog.at_level(logging.WARNING, logger="rlprof"):
            mine = servers.server_root(root, "rollout")
        assert mine.parent == root / servers.SERVERS_DIR and mine.name.startswith("rollout.") and mine != root
        assert any("two servers were given the name 'rollout'" in m and f"(pid {other.pid})" in m
                   for m in caplog.messages), caplog.messages
        assert json.loads((root / claim.CLAIM).read_text())["id"] == "theirs"  # untouched
    finally:
        other.kill()
        other.wait()
    assert claim.take(root, "rollout") == claim.Holder("rollout", True)  # that server ended: a restart takes it


def _holding(monkeypatch, root: Path, name: str) -> None:
    monkeypatch.setattr(claim, "LEASE_S", 0.4)
    servers._resolved.pop((str(root), name), None)
    assert servers.server_root(root, name) == root  # held, its lease thread running


def _moved_within(root: Path, name: str, timeout: float = 30) -> Path:
    deadline = time.monotonic() + timeout
    while servers.current(root) == root and time.monotonic() < deadline:
        time.sleep(0.05)
    return servers.current(root)


def test_a_holder_whose_claim_was_taken_over_never_writes_the_root_again(tmp_path, monkeypatch, caplog):
    """A stopped process's lease runs out and the next server takes the root over: once this process runs
    again its lease thread finds the claim another's, says so, and its next session writes below
    servers/<name>/; the root's step folders are the new holder's alone."""
    import logging

    from rlprof_plugins.session.states import Session

    root = tmp_path / "taken"
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        _holding(monkeypatch, root, "old-holder")
        (root / claim.CLAIM).write_text(json.dumps({"server": "new-holder", "host": "another-host", "pid": 7,
                                                    "id": "new"}))
        moved = _moved_within(root, "old-holder")
    assert moved == root / servers.SERVERS_DIR / "old-holder"
    assert servers.server_root(root, "old-holder") == moved
    assert any("no longer holds" in m and "new-holder" in m for m in caplog.messages), caplog.messages
    session = Session.from_command({"op": "start", "global_step": 9}, root=str(servers.current(root)),
                                   forwards_done=0, worker_name=lambda prefix: "rank0")
    assert session.directory == moved / "global_step_9"


def test_a_lease_the_filesystem_refuses_to_renew_is_given_up(tmp_path, monkeypatch, caplog):
    import logging

    root = tmp_path / "refused"
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        _holding(monkeypatch, root, "read-only")

        def refused(*args, **kwargs):
            raise PermissionError(13, "Read-only file system")

        monkeypatch.setattr(claim.os, "utime", refused)
        moved = _moved_within(root, "read-only")
    assert moved == root / servers.SERVERS_DIR / "read-only"
    assert any("could not be renewed" in m for m in caplog.messages), caplog.messages


def test_one_name_on_two_hosts_is_two_servers_and_a_launch_is_one(tmp_path, monkeypatch, caplog):
    """A claim of this name written on another host by another launch (its instance id) is another server's
    while its lease runs: this one is told so, naming both, and writes below a folder of its own. A claim of
    the same launch (a process it started elsewhere), or one written before claims carried an instance id, is
    this server's, as it was."""
    import logging

    root = tmp_path / "two-hosts"
    root.mkdir()
    path = root / claim.CLAIM
    theirs = {"server": "rollout", "host": "node-b", "boot": "other-boot", "pidns": "pid:[1]", "pid": 4242,
              "started": 1, "id": "theirs", "instance": "launch-on-node-b"}
    path.write_text(json.dumps(theirs))
    monkeypatch.setenv(claim.INSTANCE_ENV, "launch-on-this-host")
    assert claim.take(root, "rollout") == claim.Holder("rollout", False)
    servers._resolved.pop((str(root), "rollout"), None)
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        mine = servers.server_root(root, "rollout")
    host = socket.gethostname().split(".")[0]
    assert mine.parent == root / servers.SERVERS_DIR and mine.name.startswith(f"rollout.{host}-pid")
    assert any("on node-b (pid 4242) holds" in m and f"this one on {socket.gethostname()}" in m
               for m in caplog.messages), caplog.messages
    monkeypatch.setenv(claim.INSTANCE_ENV, "launch-on-node-b")  # a process of that launch
    assert claim.take(root, "rollout") == claim.Holder("rollout", True)
    path.write_text(json.dumps({k: v for k, v in theirs.items() if k != "instance"}))  # an older claim
    monkeypatch.setenv(claim.INSTANCE_ENV, "launch-on-this-host")
    assert claim.take(root, "rollout") == claim.Holder("rollout", True)
    assert json.loads(path.read_text())["id"] == "theirs"  # never taken over while its lease runs


def test_the_nodes_of_one_server_spanning_nodes_share_its_claim(tmp_path, monkeypatch):
    """A server spanning nodes shares one name (its head's address) on every node, each node's processes
    their own; a claim written by another node of it (the same head) is this server's, even on one host."""
    root = tmp_path / "two-nodes"
    other = _live_other_process_claim(root, "head-29500")
    try:
        claim_data = json.loads((root / claim.CLAIM).read_text())
        (root / claim.CLAIM).write_text(json.dumps({**claim_data, "head": "10.0.0.1-29500"}))
        monkeypatch.setenv(claim.HEAD_ENV, "10.0.0.1-29500")
        assert claim.take(root, "head-29500") == claim.Holder("head-29500", True)
        monkeypatch.setenv(claim.HEAD_ENV, "10.0.0.2-29500")  # another server's head: a second server of one name
        assert claim.take(root, "head-29500") == claim.Holder("head-29500", False)
    finally:
        other.kill()
        other.wait()
