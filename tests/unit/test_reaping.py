"""Writers whose process is gone: a real child process writes a step's
manifest and is killed; ``reap`` marks it failed and removes its temporaries."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rlprof_plugins.store import manifest, processes, reaping

WRITER = """
import sys, time
from pathlib import Path
from rlprof_plugins.store import manifest
d = Path(sys.argv[1])
manifest.update(d, session_id="s1", writer="rank0", header={"expected_ranks": 1},
                section={"role": "worker", "state": "exporting", "files": []})
(d / ".rank0.1.pt.trace.json.gz.ab12.tmp").write_bytes(b"partial")
for sub in ("ranks", "merged"):  # the step layout keeps temporaries beside their files
    (d / sub).mkdir()
    (d / sub / f".{sub}.pt.trace.json.gz.cd34.tmp").write_bytes(b"partial")
print("ready", flush=True)
time.sleep(600)
"""


def test_a_killed_writer_is_marked_failed_and_its_temporaries_removed(tmp_path):
    step = tmp_path / "global_step_3"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(step)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        section = manifest.read(step)["writers"]["rank0"]
        assert section["process"]["pid"] == proc.pid and processes.alive(section["process"]) is True
        assert reaping.reap_all(tmp_path) == {}  # alive: nothing to do
        assert manifest.read(step)["state"] == "exporting"
        os.kill(proc.pid, signal.SIGKILL)
        # dead, not collected yet: a zombie, as a killed worker is until its engine waits for it (the kernel ends
        # it when it next runs: waited for, not slept, on a busy host)
        deadline = time.monotonic() + 60
        while Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z" \
                and time.monotonic() < deadline:
            time.sleep(0.01)
        assert Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        assert processes.alive(section["process"]) is False
        assert reaping.reap_all(tmp_path) == {str(step): ["rank0"]}
    finally:
        proc.kill()
        proc.wait()
    assert processes.alive(section["process"]) is False
    data = manifest.read(step)
    assert data["state"] == "failed" and "process gone" in data["writers"]["rank0"]["error"]
    assert not list(step.rglob(".*.tmp"))
    assert reaping.reap_all(tmp_path) == {}  # once


def test_pid_reuse_and_other_hosts():
    me = processes.identity()
    assert processes.alive(me) is True
    assert processes.alive({**me, "started": (me["started"] or 0) + 1}) is False  # same pid, another process
    assert processes.alive({**me, "host": "elsewhere"}) is None  # cannot tell from here
    assert processes.alive(None) is None


def test_the_tools_reap_before_reading(tmp_path, capsys):
    from rlprof_plugins.cli import command as cli

    step = tmp_path / "global_step_1"
    step.mkdir()
    gone = {"host": processes.identity()["host"], "pid": 2 ** 22 + 7, "started": 1, "boot": None}
    (step / "manifest.json").write_text(json.dumps({
        "schema": 1, "session_id": "s", "state": "exporting", "expected_ranks": 1, "files": [],
        "writers": {"rank0": {"role": "worker", "state": "exporting", "files": [], "process": gone}}}))
    assert cli.main(["merge", str(step), "-q"]) == 1  # nothing to merge, but the step is settled
    assert "rank0 marked failed" in capsys.readouterr().err
    assert manifest.read(step)["state"] == "failed"
