"""Adaptations that let an older release's Python sources import next to the
newer dependencies of the test environments. Test scaffolding only: each
one touches a third-party library, never the engine's own modules or rlprof.

- torch 2.13 dropped ``torch._C._cpu._is_avx512_supported``, which vLLM
  0.17's CPU platform calls while importing its (absent) kernels: answer
  False (no AVX-512 kernels to load).
- transformers in .venv-sglang (for SGLang 0.5.23) already defines model
  types that SGLang 0.5.12-0.5.15 register themselves (``qwen3_asr``):
  let ``AutoConfig.register`` keep the existing entry instead of raising.
"""

from __future__ import annotations


def adapt(engine: str) -> None:
    import torch

    if not hasattr(torch._C._cpu, "_is_avx512_supported"):
        torch._C._cpu._is_avx512_supported = lambda: False
    if engine == "sglang":
        from transformers import AutoConfig

        original = AutoConfig.register

        def register(model_type, config, exist_ok=False):
            return original(model_type, config, exist_ok=True)

        AutoConfig.register = staticmethod(register)
