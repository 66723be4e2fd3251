"""Each test folder runs in the environment of the engine it needs:
tests/sglang imports SGLang (.venv-sglang), tests/vllm imports vLLM (.venv-vllm);
``make test`` runs both environments."""

import importlib.util

collect_ignore = []
if importlib.util.find_spec("sglang") is None:
    collect_ignore.append("sglang")
if importlib.util.find_spec("vllm") is None:
    collect_ignore.append("vllm")
