"""Benchmark: what following the requests that held each step costs vLLM's frontend (``patches/vllm/request_times.py``).

vLLM's own ``OutputProcessor`` (no tokenizer, statistics off, as verl runs it) is fed an RL-shaped rollout:
``--requests`` prompts added at once, each response of its own length (most short, a long tail of a few
ten times longer), one token per request per engine iteration until the last ends. The same rollout is run
with the patch reverted (vLLM as it is) and applied with a ``LongestRequests`` on the processor, alternating,
``--rounds`` times each; the time of ``add_request`` and ``process_outputs`` over the rollout is compared:
the ratio, and the difference per request and per iteration.

Usage: ``.venv-vllm/bin/python benchmarks/bench_request_times.py [--requests 256] [--rounds 7] [--json F]``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))  # after site-packages: rlprof_plugins is the installed wheel


def lengths(requests: int, seed: int = 7) -> list[int]:
    """Response lengths of one rollout: most 20 to 120 tokens, one in twenty-five ten times longer."""
    rng = random.Random(seed)
    return [rng.randint(200, 1200) if k % 25 == 0 else rng.randint(20, 120) for k in range(requests)]


def one_rollout(requests: int, keeper_root: str | None) -> tuple[float, int]:
    """The seconds ``add_request`` and ``process_outputs`` took over one rollout, and its iterations."""
    from vllm.sampling_params import SamplingParams
    from vllm.v1.engine import EngineCoreOutput, EngineCoreRequest, FinishReason
    from vllm.v1.engine.output_processor import OutputProcessor

    from rlprof_plugins.metrics.requests import LongestRequests
    from rlprof_plugins.patches.vllm.request_times import KEEPER_ATTR

    processor = OutputProcessor(None, log_stats=False)
    keeper = None
    if keeper_root is not None:
        keeper = processor.__dict__[KEEPER_ATTR] = LongestRequests(keeper_root, "bench")
    todo = {f"r{k}": n for k, n in enumerate(lengths(requests))}
    made = [EngineCoreRequest(request_id=rid, external_req_id=rid, prompt_token_ids=[1] * 32, mm_features=None,
                              sampling_params=SamplingParams(max_tokens=n, detokenize=False), pooling_params=None,
                              arrival_time=time.time(), lora_request=None, cache_salt=None, data_parallel_rank=None)
            for rid, n in todo.items()]
    spent = 0.0
    started = time.perf_counter()
    for request in made:
        processor.add_request(request, None)
    spent += time.perf_counter() - started
    iterations = 0
    while todo:
        outputs = []
        for rid in list(todo):
            todo[rid] -= 1
            done = todo[rid] == 0
            outputs.append(EngineCoreOutput(request_id=rid, new_token_ids=[7],
                                            finish_reason=FinishReason.LENGTH if done else None))
            if done:
                del todo[rid]
        started = time.perf_counter()
        processor.process_outputs(outputs)
        spent += time.perf_counter() - started
        iterations += 1
    if keeper is not None:
        keeper.close()
    return spent, iterations


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from rlprof_plugins.patches.vllm.request_times import OUTPUT_PROCESSOR_PATCH

    module = importlib.import_module(OUTPUT_PROCESSOR_PATCH.module)
    times: dict[str, list[float]] = {"vllm": [], "rlprof": []}
    iterations = 0
    with tempfile.TemporaryDirectory() as root:
        one_rollout(args.requests, None)  # imports and first-call costs, in neither arm
        for _ in range(args.rounds):
            for arm in ("vllm", "rlprof"):
                if arm == "rlprof":
                    OUTPUT_PROCESSOR_PATCH.apply(module)
                try:
                    seconds, iterations = one_rollout(args.requests, root if arm == "rlprof" else None)
                finally:
                    OUTPUT_PROCESSOR_PATCH.revert()
                times[arm].append(seconds)
    native, ours = statistics.median(times["vllm"]), statistics.median(times["rlprof"])
    result = {
        "requests": args.requests, "iterations": iterations, "rounds": args.rounds,
        "vllm_s": round(native, 4), "rlprof_s": round(ours, 4), "ratio": round(ours / native, 3),
        "per_request_us": round((ours - native) / args.requests * 1e6, 2),
        "per_iteration_us": round((ours - native) / iterations * 1e6, 2),
        "seconds": {arm: [round(t, 4) for t in ts] for arm, ts in times.items()},
    }
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
