"""verl's in-process profiling calls on vLLM, replayed; run as a script by a test.

The sequence of verl's ``vLLMHttpServer`` (volcengine/verl,
``verl/workers/rollout/vllm_rollout/vllm_async_server.py``): an ``AsyncLLM``
built from ``AsyncEngineArgs`` with a ``profiler_config`` dict that verl
builds itself (native keys only), ``await engine.start_profile()`` with no
arguments, generation, ``await engine.stop_profile()``, and right after it
returns verl moves the trace files out of the profiler directory. This
script lists that directory at the instant the stop returns and again after
a pause: a file that appears only later is one verl would have left behind.

    python verl_vllm.py MODEL TRACE_DIR TP   # RLPROF_DISABLE=1 for native vLLM

Prints one line ``RESULT {...}``. A script, not pytest's own process,
because vLLM's engine processes re-import ``__main__``.
"""

import asyncio
import json
import sys
import time
from pathlib import Path


def listing(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*.pt.trace.json*") if p.is_file())


async def main(model: str, trace_dir: str, tp: int) -> None:
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    args = AsyncEngineArgs(
        model=model, max_model_len=256, max_num_seqs=4, max_num_batched_tokens=256, dtype="float32",
        enforce_eager=True, tensor_parallel_size=tp, distributed_executor_backend="mp" if tp > 1 else None,
        # verl's profiler_config: native keys only (torch_profiler_dir, stack/shapes/memory, frontend)
        profiler_config={"profiler": "torch", "torch_profiler_dir": trace_dir, "torch_profiler_with_stack": False,
                         "torch_profiler_record_shapes": False, "torch_profiler_with_memory": False,
                         "ignore_frontend": False})
    engine = AsyncLLM.from_engine_args(args)
    try:
        await engine.start_profile()
        for i in range(2):
            async for _ in engine.generate("the rollout engine", SamplingParams(max_tokens=8, ignore_eos=True),
                                           request_id=f"verl-{i}"):
                pass
        began = time.monotonic()
        await engine.stop_profile()
        stop_seconds = time.monotonic() - began
        at_return = listing(Path(trace_dir))
        await asyncio.sleep(5)
        later = listing(Path(trace_dir))
    finally:
        engine.shutdown()
    print("RESULT " + json.dumps({"at_return": at_return, "later": later, "stop_seconds": stop_seconds}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
