"""A Google Cloud Storage server on the loopback: PyPI's ``gcp-storage-emulator`` (``make env``), in its own process.

gcsfs, the library rlprof reaches ``gs://`` through, finds it as users' code finds an emulator:
``STORAGE_EMULATOR_HOST`` in the environment (``env``), anonymous credentials. Before it settles on no
credentials, google-auth looks for the metadata server of a Google Compute Engine host (a link-local
address), and gcsfs asks Google's storage-control service for each bucket's layout. ``GCS_LOOPBACK_ONLY``
turns both off and names a loopback address for the first, so nothing leaves the machine; google-auth reads
it once, at import, so tests/conftest.py puts it in the environment of every test process and its children.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .vllm_server import answers, free_port, stop_process

GCS_LOOPBACK_ONLY = {"NO_GCE_CHECK": "true", "GCE_METADATA_HOST": "127.0.0.1:9", "GCE_METADATA_IP": "127.0.0.1:9",
                     "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}


def emulator_binary() -> str | None:
    return shutil.which("gcp-storage-emulator") or shutil.which("gcp-storage-emulator",
                                                               path=str(Path(sys.executable).parent))


def gcs_available() -> bool:
    try:
        import gcsfs  # noqa: F401
    except ImportError:
        return False
    return emulator_binary() is not None


class GcsEmulator:
    """One emulator with one bucket; its objects in memory, gone with the process (``stop`` then ``start``:
    the store down, then back at the same address with its bucket empty)."""

    def __init__(self, folder: Path, bucket: str = "rlprof") -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.bucket, self.port = bucket, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = folder / "gcs-emulator.log"
        self.start()

    def start(self) -> None:
        binary = emulator_binary()
        assert binary, "gcp-storage-emulator is missing: `make env` installs it (the test extra)"
        self.process = subprocess.Popen(
            [binary, "start", "--host", "127.0.0.1", "--port", str(self.port), "--in-memory",
             "--default-bucket", self.bucket],
            stdout=self.log.open("a"), stderr=subprocess.STDOUT, start_new_session=True)
        if not answers(f"{self.url}/storage/v1/b/{self.bucket}", (200,), self.process, timeout=60):
            self.stop()
            raise RuntimeError(f"gcp-storage-emulator did not start:\n{self.log.read_text()[-3000:]}")

    def env(self) -> dict[str, str]:
        return {"STORAGE_EMULATOR_HOST": self.url, **GCS_LOOPBACK_ONLY}

    def apply_env(self, monkeypatch) -> None:
        for key, value in self.env().items():
            monkeypatch.setenv(key, value)

    def client(self):
        """A GCS filesystem of this server (gcsfs), for a test to look into the bucket as a user would."""
        import gcsfs

        return gcsfs.GCSFileSystem(token="anon", endpoint_url=self.url, skip_instance_cache=True)

    def uri(self, prefix: str) -> str:
        return f"gs://{self.bucket}/{prefix}"

    def stop(self) -> None:
        stop_process(self.process, grace=5)


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    """One emulator per test module (a test file imports this fixture by name)."""
    server = GcsEmulator(tmp_path_factory.mktemp("gcs"))
    yield server
    server.stop()


__all__ = ["GcsEmulator", "gcs", "gcs_available"]
