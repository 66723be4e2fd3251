"""Start and stop a real SGLang server on CPU for end-to-end tests.

The server runs in ``.venv-sglang`` (SGLang 0.5.23 and vLLM pin different
torch builds, so each engine has its own environment); the tests talk to it
over HTTP only. Recipe: shared engine notes, "SGLang 0.5.23 on CPU".
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from .vllm_server import REPO, TINY_MODEL, TwoNodeServer, VllmServer, free_port, launch, launch_two_nodes

SGLANG_PYTHON = Path(os.environ.get("RLPROF_SGLANG_PYTHON", REPO / ".venv-sglang" / "bin" / "python"))
SMALL_FLAGS = [
    "--device", "cpu", "--attention-backend", "torch_native", "--sampling-backend", "pytorch",
    "--context-length", "256", "--max-total-tokens", "4096", "--max-running-requests", "4",
    "--dtype", "float32", "--disable-cuda-graph", "--grammar-backend", "none", "--skip-server-warmup",
]


def available() -> bool:
    return SGLANG_PYTHON.exists()


def cpu_env(tp: int = 1, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(SGLANG_USE_CPU_ENGINE="1", HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1")
    if tp > 1:
        env["SGLANG_CPU_OMP_THREADS_BIND"] = "|".join(str(i) for i in range(tp))
    env.pop("RLPROF_PROFILER_CONFIG", None)
    env.update(extra)
    return env


# SGLang's scheduler polls its sockets without pause when it has no batch: an idle TP=1 server keeps
# one core busy, TP=2 about one and a half (measured here, 10 s idle after one request: 1.02 and 1.47
# cores; with --sleep-on-idle 0.04 and 0.06). On CI's two cores every other test waited on that, so
# servers sleep when idle (SGLang's own flag: "Reduce CPU usage when sglang is idle") unless a test is
# about the idle loop itself: the bursty sessions' servers keep SGLang's default (sleep_on_idle=False).
SLEEP_ON_IDLE = ["--sleep-on-idle"]


def server_command(port: int, profiler_config: dict | None, tp: int = 1, extra: list[str] | None = None,
                   sleep_on_idle: bool = True) -> list[str]:
    cmd = [str(SGLANG_PYTHON), "-m", "sglang.launch_server", "--model-path", str(TINY_MODEL),
           "--host", "127.0.0.1", "--port", str(port), *SMALL_FLAGS, *(SLEEP_ON_IDLE if sleep_on_idle else [])]
    if tp > 1:
        cmd += ["--tp", str(tp)]
    if profiler_config is not None:
        cmd += ["--profiler-config", json.dumps(profiler_config)]
    return cmd + list(extra or [])


class SglangServer(VllmServer):
    def complete(self, prompt: str = "the rollout engine", max_tokens: int = 8) -> dict:
        """One request through SGLang's native API; ``max_tokens`` tokens exactly."""
        r = self.post("/generate", {"text": prompt, "sampling_params": {
            "max_new_tokens": max_tokens, "ignore_eos": True, "temperature": 0}})
        assert r.status_code == 200, r.text
        return r.json()


def start_server(tmp: Path, profiler_config: dict | None, *, tp: int = 1, extra: list[str] | None = None,
                 env: dict[str, str] | None = None, timeout: float = 240, sleep_on_idle: bool = True) -> SglangServer:
    port = free_port()
    return launch(SglangServer, "SGLang", tmp, tmp / f"sglang-{port}.log", port,
                  server_command(port, profiler_config, tp, extra, sleep_on_idle), cpu_env(tp, **(env or {})),
                  profiler_config, timeout)


def run_until_exit(tmp: Path, args: list[str], timeout: float = 180,
                   env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Launch with raw arguments, expecting the launch to stop (bad configuration)."""
    cmd = [str(SGLANG_PYTHON), "-m", "sglang.launch_server", "--model-path", str(TINY_MODEL),
           "--port", str(free_port()), *SMALL_FLAGS, *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=cpu_env(**(env or {})), timeout=timeout, cwd=tmp)


def start_two_nodes(tmp: Path, config: dict, timeout: float = 300) -> TwoNodeServer:
    """One SGLang server spanning two "nodes" on this machine (``--tp 2 --nnodes 2
    --node-rank R --dist-init-addr``, a scheduler on each): node 0 serves HTTP,
    node 1 answers only SGLang's dummy health check."""
    port, node1_port, init = free_port(), free_port(), free_port()

    def command(node: int, http_port: int) -> list[str]:
        return server_command(http_port, config, tp=2, extra=["--nnodes", "2", "--node-rank", str(node),
                                                              "--dist-init-addr", f"127.0.0.1:{init}"])

    return launch_two_nodes(SglangServer, "sglang", tmp, port, (command(0, port), command(1, node1_port)),
                            (cpu_env(SGLANG_CPU_OMP_THREADS_BIND="0"), cpu_env(SGLANG_CPU_OMP_THREADS_BIND="1")),
                            config, timeout)
