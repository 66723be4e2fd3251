"""verl's ``SGLangHttpServer`` as a Ray actor, with a stand-in start-up and a real SGLang engine.

What is verl's code here: the class and every profiling method the test
calls (``start_profile``, which builds its own ``tokenizer_manager.
start_profile(**build_sglang_profiler_args(...))`` call, ``stop_profile``,
``set_global_steps``; through them ``DistProfiler`` and
``relocate_rollout_traces``). What stands in: ``__init__`` and ``launch``
(verl's ``launch_server`` also starts hybrid workers and the HTTP app); they
set the attributes the profiling methods read (``profiler_setup``) and start
SGLang the way ``launch_server`` does on SGLang >= 0.5.10
(``Engine._launch_subprocesses`` with SGLang's own process functions) on
the tiny CPU model. ``rollout`` stands in for verl's ``generate``.
"""

from __future__ import annotations

from verl.workers.rollout.sglang_rollout.async_sglang_server import SGLangHttpServer

from tests.verl.profiler_setup import attach

# tests/helpers/sglang_server.py's flags for the CPU engine, as ServerArgs fields
CPU_ARGS = dict(device="cpu", attention_backend="torch_native", sampling_backend="pytorch", context_length=256,
                max_total_tokens=4096, max_running_requests=4, dtype="float32", disable_cuda_graph=True,
                grammar_backend="none", skip_server_warmup=True, log_level="error")


class TestSGLangServer(SGLangHttpServer):
    def __init__(self, save_path: str, model: str, relocate_results: bool = False, replica_rank: int = 0):
        self.model_path = model
        attach(self, save_path, relocate_results=relocate_results, replica_rank=replica_rank)

    async def launch(self) -> None:
        import sglang.srt.entrypoints.engine
        from sglang.srt.entrypoints.http_server import Engine
        from sglang.srt.server_args import ServerArgs

        server_args = ServerArgs(model_path=self.model_path, **CPU_ARGS)
        self.tokenizer_manager, self.template_manager, self.scheduler_info, *_ = Engine._launch_subprocesses(
            server_args=server_args,
            init_tokenizer_manager_func=sglang.srt.entrypoints.engine.init_tokenizer_manager,
            run_scheduler_process_func=sglang.srt.entrypoints.engine.run_scheduler_process,
            run_detokenizer_process_func=sglang.srt.entrypoints.engine.run_detokenizer_process,
        )

    async def rollout(self, requests: int) -> int:
        from sglang.srt.managers.io_struct import GenerateReqInput

        tokens = 0
        for _ in range(requests):
            obj = GenerateReqInput(text="the rollout engine",
                                   sampling_params={"max_new_tokens": 6, "ignore_eos": True, "temperature": 0})
            async for out in self.tokenizer_manager.generate_request(obj, None):
                tokens = out["meta_info"]["completion_tokens"]
        return tokens

    async def close(self) -> None:
        from sglang.srt.utils import kill_process_tree
        import os

        kill_process_tree(os.getpid(), include_parent=False)
