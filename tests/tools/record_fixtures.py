"""Record the real TP=2 trace fixtures kept in tests/fixtures/ (``make fixtures``; minutes, both engines).

``python tests/tools/record_fixtures.py OUT`` starts the real CPU servers of
tests/helpers (stacks off, the tiny model) and drives the same traffic through
each (two concurrent requests), after one warm-up request so that
torch.compile's first-request work is not what the fixtures show:

- ``vllm-0.32-cpu-tp2/``: vLLM 0.32 with rlprof. ``global_step_3`` a whole
  session over the window ``[0, 6)`` (2 prefills, 4 decodes),
  ``global_step_4`` by stage over ``[0, 10)`` (2 prefills, 8 decodes): twice
  the decode iterations of the same traffic, on which the report's
  per-iteration operator changes are checked;
- ``vllm-0.32-cpu-tp2-native/`` and ``sglang-0.5.23-cpu-tp2-native/``: the
  engines' own profilers (``RLPROF_DISABLE=1``), traces as the engines name
  them, flat, the way users bring traces they already have.

Each folder is copied as written; the tests read them, never this script.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # tests/ from this checkout, after the wheel

from tests.helpers import sglang_server, vllm_server  # noqa: E402


def traffic(server, requests: int = 2, tokens: int = 12) -> None:
    """``requests`` concurrent completions of ``tokens`` tokens: one prefill, then decodes."""
    threads = [threading.Thread(target=server.complete, kwargs={"max_tokens": tokens}) for _ in range(requests)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def rlprof_vllm(out: Path, tmp: Path) -> None:
    config = {"profiler": "torch", "torch_profiler_dir": str(tmp / "traces"), "torch_profiler_with_stack": False}
    server = vllm_server.start_server(tmp, config, tp=2)
    try:
        server.complete(max_tokens=4)  # warm-up
        for step, window, by_stage in ((3, 6, False), (4, 10, True)):
            body = {"global_step": step, "step_start": 0, "step_end": window, "by_stage": by_stage}
            assert server.post("/start_profile", body).status_code == 200
            traffic(server, tokens=2 * window)
            server.wait_state()
        shutil.copytree(tmp / "traces", out / "vllm-0.32-cpu-tp2", ignore=shutil.ignore_patterns(".manifest.lock"))
    finally:
        server.stop()


def native_vllm(out: Path, tmp: Path) -> None:
    folder = tmp / "native"
    config = {"profiler": "torch", "torch_profiler_dir": str(folder), "torch_profiler_with_stack": False}
    server = vllm_server.start_server(tmp, config, tp=2, env={"RLPROF_DISABLE": "1"})
    try:
        server.complete(max_tokens=4)  # warm-up
        assert server.post("/start_profile", {}).status_code == 200
        traffic(server)
        assert server.post("/stop_profile", {}).status_code == 200
        _copy_when_written(folder, out / "vllm-0.32-cpu-tp2-native", ranks=2)
    finally:
        server.stop()


def native_sglang(out: Path, tmp: Path) -> None:
    folder = tmp / "native"
    server = sglang_server.start_server(tmp, None, tp=2, env={"RLPROF_DISABLE": "1"}, sleep_on_idle=False)
    try:
        server.complete(max_tokens=4)  # warm-up
        body = {"output_dir": str(folder), "num_steps": 10, "activities": ["CPU"], "with_stack": False}
        assert server.post("/start_profile", body).status_code == 200
        traffic(server)
        _copy_when_written(folder, out / "sglang-0.5.23-cpu-tp2-native", ranks=2)
    finally:
        server.stop()


def _copy_when_written(folder: Path, to: Path, ranks: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [p for p in folder.rglob("*.json.gz") if "async_llm" not in p.name]
        if len(found) >= ranks:
            time.sleep(2)  # the writers rename into place; let the last finish
            to.mkdir(parents=True)
            for p in folder.rglob("*.json.gz"):
                shutil.copy2(p, to / p.name)
            return
        time.sleep(1)
    raise RuntimeError(f"{folder}: fewer than {ranks} traces after {timeout}s")


def main() -> int:
    import tempfile

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for record in (rlprof_vllm, native_vllm, native_sglang):
        with tempfile.TemporaryDirectory() as tmp:
            record(out, Path(tmp))
        print(f"recorded {record.__name__}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
