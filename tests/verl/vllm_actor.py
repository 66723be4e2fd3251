"""verl's ``vLLMHttpServer`` as a Ray actor, with a stand-in start-up and a real vLLM engine.

What is verl's code here: the class and every profiling method the test
calls (``start_profile``, ``stop_profile``, ``set_global_steps``; through
them ``_should_profile``, ``DistProfiler`` and ``relocate_rollout_traces``),
and ``build_vllm_profiler_args``, which makes the engine's profiler config
on the replica verl traces (``_should_profile``, as ``launch_server`` asks it).
What stands in: ``__init__`` and ``launch`` (verl's ``launch_server`` also
starts hybrid workers, an OpenAI app and weight-transfer sockets); they set
the attributes the profiling methods read (``profiler_setup``) and build
the ``AsyncLLM`` the way ``run_server`` does (``create_engine_config``, then
``AsyncLLM.from_vllm_config``) on the tiny CPU model. ``rollout`` stands in
for verl's token-in/token-out ``generate``.
"""

from __future__ import annotations

import json

from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer

from tests.verl.profiler_setup import attach


class TestVllmServer(vLLMHttpServer):
    def __init__(self, save_path: str, model: str, relocate_results: bool = False, replica_rank: int = 0):
        self.model_path = model
        attach(self, save_path, relocate_results=relocate_results, replica_rank=replica_rank)

    async def launch(self) -> None:
        from verl.utils.profiler import build_vllm_profiler_args
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.usage.usage_lib import UsageContext
        from vllm.v1.engine.async_llm import AsyncLLM

        profiler = {}
        if self._should_profile():  # as verl's launch_server: only the replica it traces gets a profiler config
            profiler_args = build_vllm_profiler_args(self.profiler_controller.config,
                                                     self.profiler_controller.tool_config, self.replica_rank,
                                                     legacy_env=False)
            profiler["profiler_config"] = json.loads(profiler_args["profiler_config"])
        args = AsyncEngineArgs(model=self.model_path, max_model_len=256, max_num_seqs=4, max_num_batched_tokens=256,
                               dtype="float32", enforce_eager=True, **profiler)
        vllm_config = args.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
        self.engine = AsyncLLM.from_vllm_config(vllm_config=vllm_config, usage_context=UsageContext.OPENAI_API_SERVER)

    async def rollout(self, requests: int) -> int:
        from vllm import SamplingParams

        import uuid

        tokens = 0
        for _ in range(requests):
            async for out in self.engine.generate("the rollout engine", SamplingParams(max_tokens=6, ignore_eos=True),
                                                  request_id=uuid.uuid4().hex):
                tokens = len(out.outputs[0].token_ids)
        return tokens

    async def close(self) -> None:
        self.engine.shutdown()
