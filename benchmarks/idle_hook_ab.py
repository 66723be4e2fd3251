"""In-process A/B: one vLLM engine, rounds alternating between the rlprof
worker hook applied (plugin loaded, no session) and reverted (as if the
plugin were absent). Same process, same engine, same prompts, so the only
difference is the hook on ``Worker.execute_model``/``sample_tokens``, the
plugin's only code on the per-iteration path. Prints one JSON line.

Run by bench_vllm_profiling.py; needs VLLM_ENABLE_V1_MULTIPROCESSING=0 so the
worker lives in this process.
"""

import json
import statistics
import sys
import time


def warm_engine(model: str, trace_dir: str):
    """The in-process engine both A/B scripts drive (this one, ``flight_ab.py``), warmed up: the engine, its 8
    prompts and the sampling of 64 tokens each."""
    from vllm import LLM, SamplingParams

    llm = LLM(model=model, max_model_len=256, max_num_seqs=8, max_num_batched_tokens=256, dtype="float32",
              enforce_eager=True, profiler_config={"profiler": "torch", "torch_profiler_dir": trace_dir})
    prompts = [f"the rollout engine {k}" for k in range(8)]
    params = SamplingParams(max_tokens=64, ignore_eos=True)
    llm.generate(prompts, params, use_tqdm=False)  # warm-up
    return llm, prompts, params


def main() -> None:
    from vllm.v1.worker import gpu_worker

    from rlprof_plugins.patches.base import apply_guarded
    from rlprof_plugins.patches.vllm.worker import WORKER_PATCH
    from rlprof_plugins.patches.vllm.facts import version as vllm_version

    model, trace_dir, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    llm, prompts, params = warm_engine(model, trace_dir)
    assert WORKER_PATCH.applied
    rates = {"hook": [], "no_hook": []}
    for r in range(2 * rounds):
        label = "hook" if r % 2 == 0 else "no_hook"
        if label == "hook":
            apply_guarded(WORKER_PATCH, gpu_worker, vllm_version())
        else:
            WORKER_PATCH.revert()
        t = time.perf_counter()
        outs = llm.generate(prompts, params, use_tqdm=False)
        tokens = sum(len(o.outputs[0].token_ids) for o in outs)
        rates[label].append(tokens / (time.perf_counter() - t))
    print("AB " + json.dumps({k: statistics.median(v) for k, v in rates.items()} | {"rounds": rates}))


if __name__ == "__main__":
    main()
