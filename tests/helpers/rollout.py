"""An RL rollout step as trainers send it, for the benchmarks and the live tests that judge speed or anomalies.

A rollout sends every prompt of a step at once and waits for the last response: the engine batches
continuously and never waits for work until the step's tail ends. ``rollout_plan`` is one such step: a
batch of prompts of varied lengths, several samples of each, responses of varied lengths with a long tail
(a few many times longer than the rest); ``rollout`` sends it, all at once, to a vLLM or SGLang server. The
servers need room for it: ``VLLM_FLAGS`` / ``SGLANG_FLAGS`` (the tiny model's context is 512 tokens).
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass

import requests

PROMPTS, SAMPLES = 8, 2  # a rollout batch: prompts, and responses sampled per prompt
# one prompt of each length, a few to about 280 tokens: the tiny model's tokenizer makes up to about 3.5
# tokens of a word, and the longest prompt with the longest response must fit its 512-token context whatever
# the seed pairs them with (150 words could tokenize past 512 alone)
PROMPT_WORDS = (4, 8, 14, 22, 32, 45, 60, 80)
# responses: most short, a long tail (the step runs nearly empty until the longest ends)
RESPONSE_TOKENS = (12, 16, 16, 20, 24, 24, 28, 32, 32, 36, 40, 48, 64, 96, 128, 192)
# room for the step's longest prompt and response, and the whole batch running at once
VLLM_FLAGS = ["--max-model-len", "512", "--max-num-seqs", "16", "--max-num-batched-tokens", "1024"]
SGLANG_FLAGS = ["--context-length", "512", "--max-running-requests", "16", "--max-total-tokens", "16384"]


@dataclass(frozen=True)
class Request:
    prompt: str
    max_tokens: int


def rollout_plan(seed: int = 0) -> list[Request]:
    """One rollout step's requests: each prompt ``SAMPLES`` times, the response lengths shuffled over them."""
    rng = random.Random(seed)
    words = "policy reward token value rollout batch sample gradient advantage critic actor trainer".split()
    prompts = [" ".join(rng.choice(words) for _ in range(n)) for n in PROMPT_WORDS]
    lengths = list(RESPONSE_TOKENS)
    rng.shuffle(lengths)
    return [Request(p, lengths[k * SAMPLES + s]) for k, p in enumerate(prompts) for s in range(SAMPLES)]


def send(server, engine: str, request: Request) -> None:
    from tests.helpers.vllm_server import TINY_MODEL

    if engine == "vllm":
        path, body = "/v1/completions", {"model": str(TINY_MODEL), "prompt": request.prompt,
                                         "max_tokens": request.max_tokens, "ignore_eos": True, "temperature": 1.0}
    else:
        path, body = "/generate", {"text": request.prompt, "sampling_params": {
            "max_new_tokens": request.max_tokens, "ignore_eos": True, "temperature": 1.0}}
    r = requests.post(server.url + path, json=body, timeout=1800)
    assert r.status_code == 200, r.text[:300]


def rollout(server, engine: str, plan: list[Request]) -> float:
    """Every request of the step at once; the seconds from the first sent to the last answered."""
    failed: list[BaseException] = []

    def one(request: Request) -> None:
        try:
            send(server, engine, request)
        except BaseException as e:  # handed to the caller
            failed.append(e)

    threads = [threading.Thread(target=one, args=(r,)) for r in plan]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failed:
        raise failed[0]
    return time.perf_counter() - t0
