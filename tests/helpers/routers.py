"""Start the real routers RL fleets put in front of rollout servers.

vllm-router and sglang-router are Rust programs shipped in PyPI wheels
(installed into .venv-vllm by ``make env``). The tests only need what a
trainer needs from them: their worker listing, ``GET /workers``. The two
list a worker that is down differently, and both ways are exercised:
vllm-router keeps listing it, sglang-router (SGLang Model Gateway) drops a
worker whose registration failed.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import requests

from .vllm_server import free_port

COMMANDS = {
    "vllm-router": [sys.executable, "-m", "vllm_router.launch_router"],
    "sglang-router": [sys.executable, "-m", "sglang_router.launch_router"],
}


@dataclass
class Router:
    name: str
    url: str
    process: subprocess.Popen
    log_path: Path
    admin_key: str | None = None  # for a router that guards its control plane

    def workers(self) -> list[str]:
        headers = {"Authorization": f"Bearer {self.admin_key}"} if self.admin_key else {}
        r = requests.get(self.url + "/workers", headers=headers, timeout=10)
        r.raise_for_status()
        return [w["url"] for w in r.json()["workers"]]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def start_router(name: str, tmp: Path, worker_urls: list[str], *, expect_workers: int,
                 admin_key: str | None = None, timeout: float = 60) -> Router:
    """``name`` in front of ``worker_urls``; returns once it lists ``expect_workers`` workers.

    ``admin_key`` (sglang-router): its control plane, worker listing included,
    then needs that key (``--control-plane-api-keys``, admin role)."""
    port = free_port()
    log_path = tmp / f"{name}-{port}.log"
    command = COMMANDS[name] + ["--host", "127.0.0.1", "--port", str(port), "--policy", "round_robin",
                                "--worker-urls", *worker_urls, "--worker-startup-timeout-secs", "5",
                                "--log-level", "error",
                                # each exports Prometheus metrics, on the same default port: one each
                                "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port())]
    if admin_key:
        command += ["--control-plane-api-keys", f"trainer:trainer:admin:{admin_key}"]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=tmp)
    router = Router(name, f"http://127.0.0.1:{port}", process, log_path, admin_key)
    deadline = time.time() + timeout
    listed: list[str] = []
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode}:\n{router.log()[-3000:]}")
        try:
            listed = router.workers()
            if len(listed) >= expect_workers:
                return router
        except requests.RequestException:
            pass
        time.sleep(0.5)
    router.stop()
    raise RuntimeError(f"{name} listed {listed} after {timeout}s, expected {expect_workers} workers:\n"
                       f"{router.log()[-3000:]}")
