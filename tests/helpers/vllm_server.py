"""Start and stop a real vLLM OpenAI server on CPU for end-to-end tests.

The recipe (environment, flags) is the verified one from the engine notes:
tiny model, float32, eager mode, 1 GiB KV cache.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[2]
TINY_MODEL = Path(os.environ.get("RLPROF_TINY_MODEL", REPO / ".cache" / "tiny-llama"))
SMALL_FLAGS = [
    "--max-model-len", "256", "--max-num-seqs", "4", "--max-num-batched-tokens", "256",
    "--dtype", "float32", "--enforce-eager",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(url: str, statuses: tuple[int, ...], process: subprocess.Popen, timeout: float) -> bool:
    """Whether ``url`` answers with one of ``statuses`` within ``timeout`` seconds while ``process`` runs."""
    deadline = time.time() + timeout
    while time.time() < deadline and process.poll() is None:
        try:
            if requests.get(url, timeout=2).status_code in statuses:
                return True
        except requests.RequestException:
            pass
        time.sleep(0.5)
    return False


def cpu_env(tp: int = 1, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        VLLM_CPU_KVCACHE_SPACE="1",
        HF_HUB_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        VLLM_CPU_OMP_THREADS_BIND="auto" if tp == 1 else "|".join(str(i) for i in range(tp)),
        PYTHONUNBUFFERED="1",
    )
    env.pop("RLPROF_OPTIONS", None)
    env.update(extra)
    return env


def server_command(port: int, profiler_config: dict | None, tp: int = 1, extra: list[str] | None = None) -> list[str]:
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(TINY_MODEL),
           "--host", "127.0.0.1", "--port", str(port), *SMALL_FLAGS]
    if tp > 1:
        cmd += ["--tensor-parallel-size", str(tp)]
    if profiler_config is not None:
        cmd += ["--profiler-config", json.dumps(profiler_config)]
    return cmd + list(extra or [])


@dataclass
class VllmServer:
    url: str
    process: subprocess.Popen
    log_path: Path
    trace_dir: Path
    api_key: str | None = None  # sent with every request when the server was started with one

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def post(self, path: str, body=None, **kw) -> requests.Response:
        data = None if body is None else (body if isinstance(body, (str, bytes)) else json.dumps(body))
        return requests.post(self.url + path, data=data, headers={"content-type": "application/json", **self._headers()},
                             timeout=120, **kw)

    def get(self, path: str) -> requests.Response:
        return requests.get(self.url + path, headers=self._headers(), timeout=60)

    def complete(self, prompt: str = "the rollout engine", max_tokens: int = 8) -> dict:
        r = self.post("/v1/completions", {"model": str(TINY_MODEL), "prompt": prompt, "max_tokens": max_tokens,
                                          "temperature": 0, "ignore_eos": True})
        assert r.status_code == 200, r.text
        return r.json()

    def wait_state(self, states=("done", "failed"), timeout: float = 180) -> dict:
        deadline = time.time() + timeout
        while True:
            status = self.get("/profile_status").json()
            if status["state"] in states or time.time() > deadline:
                return status
            time.sleep(0.2)

    def wait_parked(self, timeout: float = 180) -> dict:
        """The status once every rank's recording has stopped its profiler for an idle engine (``parked``):
        an engine goes idle after its last request's answer, so a test that reads the status before that
        races the engine's own stop."""
        deadline = time.time() + timeout
        while True:
            status = self.get("/profile_status").json()
            if all(r.get("parked") for r in status.get("ranks") or [{}]) or time.time() > deadline:
                return status
            time.sleep(0.05)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        stop_process(self.process)


def stop_process(process: subprocess.Popen, grace: float = 3) -> None:
    """SIGTERM to a server's process group, SIGKILL after ``grace`` seconds: no test checks an engine's
    own shutdown after this (SGLang's took 5-6 s a server, about a minute of the suite)."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


def launch(server_cls, name: str, tmp: Path, log_path: Path, port: int, command: list[str], env: dict[str, str],
           profiler_config: dict | None, timeout: float, ready: tuple[str, int] = ("/health", 200)):
    """Start an engine server process and wait until ``ready`` (a GET path and its status) answers."""
    trace_dir = Path(profiler_config["torch_profiler_dir"]) if profiler_config and "torch_profiler_dir" in profiler_config else tmp
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=tmp)
    server = server_cls(f"http://127.0.0.1:{port}", proc, log_path, trace_dir)
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}:\n{server.log()[-4000:]}")
        try:
            if requests.get(server.url + ready[0], timeout=2).status_code == ready[1]:
                return server
        except requests.RequestException:
            pass
        time.sleep(0.25)
    server.stop()
    raise RuntimeError(f"{name} did not become healthy in {timeout}s:\n{server.log()[-4000:]}")


def start_server(tmp: Path, profiler_config: dict | None, *, tp: int = 1, extra: list[str] | None = None,
                 env: dict[str, str] | None = None, timeout: float = 240) -> VllmServer:
    port = free_port()
    return launch(VllmServer, "vLLM", tmp, tmp / f"server-{port}.log", port,
                  server_command(port, profiler_config, tp, extra), cpu_env(tp, **(env or {})), profiler_config, timeout)


def run_until_exit(tmp: Path, profiler_config_arg: list[str], timeout: float = 180) -> subprocess.CompletedProcess:
    """Run the server with raw --profiler-config arguments expecting it to exit (bad config)."""
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(TINY_MODEL),
           "--port", str(free_port()), *SMALL_FLAGS, *profiler_config_arg]
    return subprocess.run(cmd, capture_output=True, text=True, env=cpu_env(), timeout=timeout, cwd=tmp)


SERVE = REPO / "tests" / "tools" / "vllm_serve.py"


@dataclass
class TwoNodeServer:
    """One server spanning two "nodes" on this machine: the head (node 0, the
    HTTP server) and node 1, a process without the API (vLLM ``--headless``,
    SGLang's dummy health check)."""

    head: VllmServer
    node1: subprocess.Popen
    node1_log: Path

    def stop(self) -> None:
        self.head.stop()
        stop_process(self.node1)


def launch_two_nodes(server_cls, name: str, tmp: Path, port: int, commands: tuple[list[str], list[str]],
                     envs: tuple[dict[str, str], dict[str, str]], config: dict | None,
                     timeout: float) -> TwoNodeServer:
    """Node 1 first, then the head until its ``/health`` answers (it waits for
    node 1 to join); node 1 is stopped, and its log shown, if the head fails."""
    node1_log = tmp / f"{name}-node1.log"
    with open(node1_log, "wb") as log:
        node1 = subprocess.Popen(commands[1], stdout=log, stderr=subprocess.STDOUT, env=envs[1],
                                 start_new_session=True, cwd=tmp)
    try:
        head = launch(server_cls, f"{name} node 0", tmp, tmp / f"{name}-node0.log", port, commands[0], envs[0], config,
                      timeout)
    except Exception as e:
        stop_process(node1)
        raise RuntimeError(f"{e}\nnode 1 log:\n{node1_log.read_text(errors='replace')[-3000:]}") from e
    return TwoNodeServer(head, node1, node1_log)


def start_two_nodes(tmp: Path, configs: tuple[dict, dict], timeout: float = 300) -> TwoNodeServer:
    """One vLLM server spanning two "nodes" (TP=2, a rank on each; engine notes,
    section 1): ``vllm serve --nnodes 2 --node-rank R`` twice, node 1
    ``--headless``; ``configs``: each node's ``--profiler-config``, as on two hosts."""
    port, master = free_port(), free_port()

    def command(node: int) -> list[str]:
        cmd = [sys.executable, str(SERVE), "serve", str(TINY_MODEL), *SMALL_FLAGS, "--tensor-parallel-size", "2",
               "--distributed-executor-backend", "mp", "--nnodes", "2", "--node-rank", str(node),
               "--master-addr", "127.0.0.1", "--master-port", str(master),
               "--profiler-config", json.dumps(configs[node])]
        return cmd + (["--headless"] if node else ["--host", "127.0.0.1", "--port", str(port)])

    def env(node: int) -> dict[str, str]:
        return cpu_env(1, VLLM_TARGET_DEVICE="cpu", VLLM_HOST_IP="127.0.0.1", VLLM_LOOPBACK_IP="127.0.0.1",
                       VLLM_CPU_OMP_THREADS_BIND=str(node))

    return launch_two_nodes(VllmServer, "vllm", tmp, port, (command(0), command(1)), (env(0), env(1)), configs[0],
                            timeout)


def start_together(starts: dict):
    """``{name: start()}`` run at once: a server's start is mostly single-threaded
    imports, so two cores start two servers in about the time of one. If any
    start fails, the ones that started are stopped and the failure raised."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(starts)) as pool:
        futures = {name: pool.submit(start) for name, start in starts.items()}
    started, failure = {}, None
    for name, future in futures.items():
        try:
            started[name] = future.result()
        except Exception as e:
            failure = failure or e
    if failure is not None:
        for server in started.values():
            server.stop()
        raise failure
    return started
