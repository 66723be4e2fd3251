"""vLLM's in-process engine chain around one worker, from the release's own
classes, for contract tests (vLLM's Worker in contract_vllm.py, vllm-ascend's
NPUWorker in tests/npu/contract_vllm_ascend.py). Imports vLLM lazily: the
release under test is put on ``sys.path`` by the test runner."""

from __future__ import annotations

import importlib

from tests.compat.contract_common import filled, try_import


def llm_over(worker, vllm_config):
    """``LLM`` -> ``LLMEngine`` -> ``InprocClient`` -> ``EngineCore`` ->
    ``UniProcExecutor`` -> ``worker``, wired as LLM's in-process engine wires
    them (no model loaded)."""
    from vllm.entrypoints.llm import LLM
    from vllm.v1.engine.core import EngineCore
    from vllm.v1.engine.core_client import InprocClient
    from vllm.v1.engine.llm_engine import LLMEngine

    executor_module = try_import("vllm.v1.executor.uniproc_executor") or importlib.import_module(
        "vllm.executor.uniproc_executor")
    executor = object.__new__(executor_module.UniProcExecutor)
    executor.driver_worker = worker
    core = object.__new__(EngineCore)
    core.model_executor, core.vllm_config = executor, vllm_config  # what EngineCore.__init__ keeps of them
    if hasattr(EngineCore, "get_weight_version"):
        core._weight_version = "default"  # EngineCore.__init__'s starting version (vLLM 0.32+)
    client = object.__new__(InprocClient)
    client.engine_core = core
    engine = object.__new__(LLMEngine)
    engine.vllm_config, engine.engine_core = vllm_config, client
    llm = object.__new__(LLM)
    llm.llm_engine = engine
    return llm


def scheduler_output(new: dict[str, int], cached: dict[str, int]):
    """One iteration's ``SchedulerOutput``: new prompts (req -> prompt tokens)
    and cached requests (req -> tokens scheduled)."""
    from vllm.v1.core.sched.output import CachedRequestData, NewRequestData, SchedulerOutput

    reqs = [filled(NewRequestData, req_id=r, prompt_token_ids=[1] * n, num_computed_tokens=0) for r, n in new.items()]
    tokens = {**new, **cached}
    return filled(SchedulerOutput, scheduled_new_reqs=reqs, scheduled_cached_reqs=CachedRequestData.make_empty(),
                  num_scheduled_tokens=tokens, total_num_scheduled_tokens=sum(tokens.values()))
