"""verl-style in-process use: LLM(profiler_config={...}) and AsyncEngineArgs."""

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.helpers.installed import TEST_PATH
from tests.helpers.rollout_tail import requests_held
from tests.helpers.traces import iteration_indices, load_trace, rank_traces
from tests.helpers.vllm_server import TINY_MODEL, cpu_env

# `make test-extended` (CI's 25 minutes: docs/testing.md): in CI, AsyncLLM in-process runs in tests/clients/test_verl_vllm.py
# and LLM in-process in tests/vllm/test_plugin_loading.py
pytestmark = pytest.mark.extended

SCRIPT = Path(__file__).with_name("inprocess_vllm.py")
REPO = Path(__file__).resolve().parents[2]


def run(mode: str, trace_dir: Path) -> list[dict]:
    proc = subprocess.run([sys.executable, str(SCRIPT), mode, str(TINY_MODEL), str(trace_dir)], capture_output=True,
                          text=True, env=cpu_env(PYTHONPATH=str(TEST_PATH)), timeout=400, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads(line[7:]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Both scripts, side by side (each is one engine process, mostly single-threaded start-up)."""
    from concurrent.futures import ThreadPoolExecutor

    folders = {mode: tmp_path_factory.mktemp(mode) for mode in ("llm", "async")}
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {mode: pool.submit(run, mode, folder) for mode, folder in folders.items()}
    return {mode: (future.result(), folders[mode]) for mode, future in futures.items()}


def test_llm_with_dict_config(runs):
    results, tmp_path = runs["llm"]
    steps = [r for r in results if r["kind"] == "step"]
    assert [(r["step"], r["started"], r["status"], r["stop"]) for r in steps] == [
        (s, "waiting", "done", True) for s in (0, 1, 2)]
    assert {"kind": "error", "field": "global_step"} in results
    assert any(r["kind"] == "conflict" for r in results)
    assert any(r["kind"] == "stop" and r["state"] in ("exporting", "done") for r in results)
    assert {"kind": "settled", "state": "done"} in results
    for step in (0, 1, 2):
        traces = rank_traces(tmp_path / f"global_step_{step}")
        assert iteration_indices(load_trace(traces["rank0"])) == [1, 2]
    assert iteration_indices(load_trace(rank_traces(tmp_path / "global_step_9")["rank0"])) == list(range(6))
    assert not (tmp_path / "global_step_10").exists()
    # step_source weight_version: LLM.update_weight_version("21") and a start without a step
    (version,) = [r for r in results if r["kind"] == "version"]
    assert version == {"kind": "version", "started": 20, "step": 20, "source": "weight_version 21 + offset -1",
                       "state": "done", "warnings": []}
    manifest = json.loads((tmp_path / "global_step_20" / "manifest.json").read_text())
    assert manifest["step_source"] == "weight_version 21 + offset -1"
    assert iteration_indices(load_trace(rank_traces(tmp_path / "global_step_20")["rank0"])) == [1, 2]
    # the offline engine's requests are followed too: step 20 (weights version 21) held by the rollout's long
    # answer, then its three short ones, then the session's one request of six tokens (a busy period before it)
    (rollout,) = [r for r in results if r["kind"] == "rollout"]
    assert rollout["tokens"] == [200, 20, 20, 20], rollout
    held = requests_held(SimpleNamespace(trace_dir=tmp_path), 20)
    assert [r["output_tokens"] for r in held] == [200, 20, 20, 20, 6], held
    assert held[0]["prompt_tokens"] > 0 and 0 < held[0]["first_token_s"] < held[0]["seconds"], held[0]


def test_async_llm_with_engine_args_dict(runs):
    results, tmp_path = runs["async"]
    assert [(r["step"], r["status"]) for r in results if r["kind"] == "step"] == [(4, "done"), (5, "done")]
    for step in (4, 5):
        traces = rank_traces(tmp_path / f"global_step_{step}")
        assert iteration_indices(load_trace(traces["rank0"])) == [0, 1]
    # AsyncLLM.update_weight_version: "6" is global step 7 (verl's offset, the default); a version
    # that is no integer records into the default folder and the start answer says why
    versioned, unversioned = [r for r in results if r["kind"] == "version"]
    assert (versioned["started"], versioned["step"], versioned["source"], versioned["state"]) == (
        7, 7, "weight_version 6 + offset 1", "done")
    assert iteration_indices(load_trace(rank_traces(tmp_path / "global_step_7")["rank0"])) == [0, 1]
    assert (unversioned["started"], unversioned["source"], unversioned["state"]) == (None, None, "done")
    assert len(unversioned["warnings"]) == 1 and "'rollout-a1b2' is not an integer" in unversioned["warnings"][0]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("global_step_")) == [
        "global_step_4", "global_step_5", "global_step_7"]
