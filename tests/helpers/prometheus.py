"""A real Prometheus (Debian's ``prometheus`` package, ``make env``) scraping a server's ``/metrics``.

Started with a one-target configuration and a 1 s scrape interval on a free
port, its storage in the test's folder; queried through its HTTP API
(``GET /api/v1/query``), as a dashboard does.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import requests

from .vllm_server import answers, free_port


class Prometheus:
    def __init__(self, folder: Path, target: str, metrics_path: str = "/metrics") -> None:
        binary = shutil.which("prometheus")
        assert binary, "Prometheus is missing: `make env` installs Debian's prometheus package"
        folder.mkdir(parents=True, exist_ok=True)
        config = folder / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                          "scrape_configs:\n  - job_name: engine\n"
                          f"    metrics_path: {metrics_path}\n    static_configs:\n      - targets: ['{target}']\n")
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = folder / "prometheus.log"
        self.process = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={folder / 'data'}",
             f"--web.listen-address={self.url.removeprefix('http://')}"],
            stdout=self.log.open("w"), stderr=subprocess.STDOUT)
        if answers(f"{self.url}/-/ready", (200,), self.process, timeout=60):
            return
        self.stop()
        raise RuntimeError(f"Prometheus did not start:\n{self.log.read_text()[-3000:]}")

    def query(self, expression: str) -> list[dict]:
        r = requests.get(f"{self.url}/api/v1/query", params={"query": expression}, timeout=10)
        r.raise_for_status()
        body = r.json()
        assert body["status"] == "success", body
        return body["data"]["result"]

    def wait_for(self, expression: str, timeout: float = 60) -> list[dict]:
        """The query's result once it has one (scrapes come every second)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            result = self.query(expression)
            if result:
                return result
            time.sleep(1)
        raise AssertionError(f"Prometheus has no {expression!r} after {timeout}s")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
