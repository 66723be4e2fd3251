"""In-process use of vLLM with the plugin, as verl does it; run by a test.

Prints one JSON line per step: ``RESULT {...}``. A script (not pytest's own
process) because vLLM's engine processes re-import ``__main__``.
"""

import asyncio
import json
import sys

TINY = sys.argv[2]
ROLLOUT_SHORT, ROLLOUT_LONG = 20, 200
SMALL = dict(max_model_len=256, max_num_seqs=4, max_num_batched_tokens=256, dtype="float32", enforce_eager=True)


def emit(**kw):
    print("RESULT " + json.dumps(kw), flush=True)


def settle(status_fn):
    import time

    for _ in range(300):
        status = status_fn()
        if status["state"] not in ("waiting", "recording", "exporting"):
            return status
        time.sleep(0.1)
    return status


def run_llm(trace_dir: str) -> None:
    from vllm import LLM, SamplingParams

    from rlprof_plugins.errors import ConflictError, RequestError

    llm = LLM(model=TINY, **SMALL, profiler_config={
        "profiler": "torch", "torch_profiler_dir": trace_dir, "torch_profiler_with_stack": False,
        "step_start": 1, "step_end": 3, "step_source": "weight_version", "trainer_step_offset": -1})
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    for step in (0, 1, 2):
        started = llm.start_profile(global_step=step)
        llm.generate(["the rollout engine"], params)
        emit(kind="step", step=step, started=started["state"], status=settle(llm.profile_status)["state"],
             stop=llm.stop_profile()["already_finished"])
    try:
        llm.start_profile(global_step=-3)
    except RequestError as e:
        emit(kind="error", field=e.field)
    llm.start_profile(global_step=9, step_start=0, step_end=None)
    try:
        llm.start_profile(global_step=10)
    except ConflictError as e:
        emit(kind="conflict", message=e.message)
    llm.generate(["the rollout engine"], params)
    emit(kind="stop", state=llm.stop_profile()["state"])
    emit(kind="settled", state=settle(llm.profile_status)["state"])
    # a trainer that versions its weights (slime's offset): version 21 is global step 20
    llm.update_weight_version("21")
    started = llm.start_profile()
    llm.generate(["the rollout engine"], params)
    status = settle(llm.profile_status)
    emit(kind="version", started=started["global_step"], step=status["global_step"], source=status["step_source"],
         state=status["state"], warnings=started.get("warnings", []))
    llm.stop_profile()
    # a rollout as trainers that generate offline send it: every prompt in one call, one answer ten times longer
    lengths = [ROLLOUT_LONG] + [ROLLOUT_SHORT] * 3
    outputs = llm.generate(["the rollout engine"] * 4, [SamplingParams(max_tokens=n, ignore_eos=True) for n in lengths])
    emit(kind="rollout", tokens=[len(o.outputs[0].token_ids) for o in outputs])


async def run_async(trace_dir: str) -> None:
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    args = AsyncEngineArgs(model=TINY, **SMALL, profiler_config={
        "profiler": "torch", "torch_profiler_dir": trace_dir, "torch_profiler_with_stack": False, "step_end": 2,
        "step_source": "weight_version"})
    engine = AsyncLLM.from_engine_args(args)

    async def record(request_id: str, **start) -> tuple[dict, dict]:
        """Start, one request, wait until done; the start answer and the status."""
        started = await engine.start_profile(**start)
        async for _ in engine.generate("the rollout engine", SamplingParams(max_tokens=4, ignore_eos=True),
                                       request_id=request_id):
            pass
        for _ in range(100):
            status = await engine.profile_status()
            if status["state"] == "done":
                break
            await asyncio.sleep(0.1)
        await engine.stop_profile()
        return started, status

    try:
        for step in (4, 5):
            _, status = await record(f"r{step}", global_step=step)
            emit(kind="step", step=step, status=status["state"])
        # verl's offset (1); then a version that is no integer: the default folder, with a warning
        for version in ("6", "rollout-a1b2"):
            await engine.update_weight_version(version)
            started, status = await record(f"v{version}")
            emit(kind="version", started=started["global_step"], step=status["global_step"],
                 source=status["step_source"], state=status["state"], warnings=started.get("warnings", []))
    finally:
        engine.shutdown()


if __name__ == "__main__":
    if sys.argv[1] == "llm":
        run_llm(sys.argv[3])
    else:
        asyncio.run(run_async(sys.argv[3]))
