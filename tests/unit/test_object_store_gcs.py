"""A ``gs://`` URI as the output folder, against a real Google Cloud Storage emulator on the loopback.

The same path as ``s3://`` (test_object_store_output.py holds its faults): the URI maps to a spool, the
uploader sends a step folder with its manifest last saying ``done``, the store down ends in ``failed`` with
the reason and the finishing command and every file kept, and the reading commands take the URI.
"""

from __future__ import annotations

import json

import pytest

from rlprof_plugins.config.options import check_directory
from rlprof_plugins.store import destination, manifest, upload
from tests.helpers.gcs_emulator import GcsEmulator, gcs, gcs_available  # noqa: F401 (gcs: the fixture)
from tests.unit.test_object_store_output import remote_manifest, spool_for, write_step

pytestmark = pytest.mark.skipif(not gcs_available(), reason="`make env` installs gcsfs and gcp-storage-emulator")


@pytest.fixture
def spool_env(gcs, tmp_path, monkeypatch):
    return spool_for(gcs, tmp_path, monkeypatch)


def test_a_gs_folder_is_accepted_and_a_step_reaches_the_bucket_manifest_last_saying_done(gcs, spool_env):
    uri = gcs.uri("job-g/traces")
    assert check_directory("torch_profiler_dir", uri + "/") == uri
    spool = destination.open_destination(uri).spool
    assert spool == spool_env.resolve() / "gs" / "rlprof" / "job-g" / "traces"
    folder = write_step(spool, 5)
    result = upload.Uploader(destination.destination_at(spool)).run_pass()
    assert result.ok and not result.pending, result
    assert manifest.read(folder)["upload"]["state"] == "done"
    remote = remote_manifest(gcs, uri, 5)
    assert remote["state"] == "done" and remote["upload"] == {
        "state": "done", "error": None, "pending": 0, "finish": None, "destination": f"{uri}/global_step_5"}
    fs = gcs.client()
    for rank in ("rank0", "rank1"):
        key = f"rlprof/job-g/traces/global_step_5/ranks/{rank}.pt.trace.json.gz"
        assert fs.cat_file(key) == (folder / "ranks" / f"{rank}.pt.trace.json.gz").read_bytes()
    assert fs.exists("rlprof/job-g/traces/steps/rank0.jsonl")


@pytest.mark.extended  # gcsfs retries each call for about half a minute before it says the store is down
def test_the_gcs_store_down_says_failed_keeps_the_files_then_done_once_it_is_back(tmp_path, monkeypatch):
    """A store that stops answering mid-job: ``failed`` with the reason and ``rlprof upload <spool>``, nothing
    removed from the spool; the store back again (at the same address) takes the upload."""
    store = GcsEmulator(tmp_path / "gone")
    store.apply_env(monkeypatch)
    monkeypatch.setenv(destination.SPOOL_ENV, str(tmp_path / "spool"))
    uri = store.uri("job-down")
    spool = destination.open_destination(uri).spool
    folder = write_step(spool, 3)
    store.stop()
    uploader = upload.Uploader(destination.destination_at(spool))
    result = uploader.run_pass()
    assert not result.ok
    state = manifest.read(folder)["upload"]
    assert state["state"] == "failed" and state["error"] and state["finish"] == f"rlprof upload {spool}"
    assert sorted(p.name for p in (folder / "ranks").iterdir()) == ["rank0.pt.trace.json.gz", "rank1.pt.trace.json.gz"]
    store.start()
    try:
        assert uploader.run_pass().ok
        assert manifest.read(folder)["upload"]["state"] == "done"
        assert remote_manifest(store, uri, 3)["upload"]["state"] == "done"
    finally:
        store.stop()


def test_the_reading_commands_take_a_gs_uri(gcs, spool_env, tmp_path, capsys):
    from rlprof_plugins.cli.command import main
    from tests.helpers.synthetic_traces import write_rank_trace

    uri = gcs.uri("job-read/traces")
    spool = destination.open_destination(uri).spool
    folder = spool / "global_step_2"
    for rank in (0, 1):
        name = f"rank{rank}.200{rank}.pt.trace.json.gz"
        write_rank_trace(folder / "ranks" / name, rank=rank, iterations=6)
        manifest.update(folder, session_id="s2", writer=f"rank{rank}",
                        section={"role": "worker", "state": "done", "files": [{"path": f"ranks/{name}"}]},
                        header={"expected_ranks": 2, "engine": "vllm", "nodes": 1})
    assert upload.Uploader(destination.destination_at(spool)).run_pass().ok
    assert main(["summary", uri, "--json", "-q"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert [s["global_step"] for s in summary["steps"]] == [2]
    out = tmp_path / "page.html"
    assert main(["report", uri, "-o", str(out), "--json", str(tmp_path / "r.json"), "-q"]) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert [s["global_step"] for s in report["steps"]] == [2]
