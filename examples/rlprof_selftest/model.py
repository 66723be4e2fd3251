"""The small random-weight transformer the self-test serves: an engine's shape, no engine.

A decoder of a few layers with a static KV cache, run as a rollout engine
runs: one prefill iteration over a batch of prompts (eager), then one decode
iteration per generated token. On CUDA each decode iteration replays one
captured CUDA graph, as vLLM and SGLang decode, so the trace holds graph
launches, kernels, memcpy and CUPTI's flow events; elsewhere decode runs eager.
Static buffers keep every address fixed, which is what graph capture needs.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, ContextManager


@dataclass(frozen=True)
class Shape:
    vocab: int = 512
    hidden: int = 256
    layers: int = 2
    heads: int = 4
    max_len: int = 128
    batch: int = 4
    prompt: int = 48


def build(device: str, shape: Shape = Shape(), seed: int = 0) -> "TinyEngine":
    return TinyEngine(device, shape, seed)


class TinyEngine:
    """The model, its cache and the iteration calls: ``prefill()``, ``decode()``."""

    def __init__(self, device: str, shape: Shape, seed: int) -> None:
        import torch

        self.torch, self.device, self.shape = torch, device, shape
        torch.manual_seed(seed)
        dtype = torch.bfloat16 if device == "cuda" else torch.float32
        self.model = _model(torch, shape).to(device=device, dtype=dtype).eval()
        b, n, d = shape.batch, shape.heads, shape.hidden // shape.heads
        self.caches = [(torch.zeros(b, shape.max_len, n, d, device=device, dtype=dtype),
                        torch.zeros(b, shape.max_len, n, d, device=device, dtype=dtype)) for _ in range(shape.layers)]
        self.tokens = torch.zeros(b, 1, dtype=torch.long, device=device)  # decode's static input
        self.position = torch.zeros(1, dtype=torch.long, device=device)
        self.next = 0
        self.graph: Any = None
        self.logits: Any = None

    @property
    def uses_graphs(self) -> bool:
        return self.device == "cuda"

    def prefill(self) -> None:
        torch, s = self.torch, self.shape
        prompts = torch.randint(0, s.vocab, (s.batch, s.prompt), device=self.device)
        with torch.inference_mode():
            logits = self.model(prompts, torch.arange(s.prompt, device=self.device), self.caches)
            self.tokens.copy_(logits.argmax(-1, keepdim=True))
        self.next = s.prompt

    def decode(self) -> None:
        torch = self.torch
        if self.next >= self.shape.max_len:
            self.prefill()
            return
        self.position.fill_(self.next)
        with torch.inference_mode():
            if self.uses_graphs:
                if self.graph is None:
                    self._capture()
                self.graph.replay()
            else:
                self.logits = self.model(self.tokens, self.position, self.caches)
            self.tokens.copy_(self.logits.argmax(-1, keepdim=True))
        self.next += 1

    def _capture(self) -> None:
        """Warm up on a side stream, then capture one decode iteration (torch's recipe for CUDA graphs)."""
        torch = self.torch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self.model(self.tokens, self.position, self.caches)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.logits = self.model(self.tokens, self.position, self.caches)

    def serve(self, schedule: list[str], around: Callable[[str], ContextManager] | None = None
              ) -> dict[str, list[float]]:
        """Run the iterations (``prefill``/``decode``), each inside ``around(stage)``; the seconds of each
        by stage, the device synchronised before an iteration ends (as an engine's sampling waits).
        What ``around`` itself costs (a profiler's pause between iterations) is not the iteration's."""
        seconds: dict[str, list[float]] = {"prefill": [], "decode": []}
        for stage in schedule:
            with around(stage) if around else contextlib.nullcontext():
                t0 = time.perf_counter()
                self.prefill() if stage == "prefill" else self.decode()
                self.sync()
                seconds[stage].append(time.perf_counter() - t0)
        return seconds

    def sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()
        elif self.device == "npu":
            self.torch.npu.synchronize()


def _model(torch: Any, s: Shape) -> Any:
    nn, F = torch.nn, torch.nn.functional
    heads, head_dim = s.heads, s.hidden // s.heads

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(s.hidden), nn.LayerNorm(s.hidden)
            self.qkv, self.out = nn.Linear(s.hidden, 3 * s.hidden), nn.Linear(s.hidden, s.hidden)
            self.up, self.down = nn.Linear(s.hidden, 4 * s.hidden), nn.Linear(4 * s.hidden, s.hidden)

        def forward(self, x, positions, cache):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, heads, head_dim).unbind(2)
            keys, values = cache
            keys.index_copy_(1, positions, k)
            values.index_copy_(1, positions, v)
            scores = torch.einsum("btnd,blnd->bntl", q, keys) / math.sqrt(head_dim)
            future = torch.arange(s.max_len, device=x.device)[None, :] > positions[:, None]
            attention = F.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
            x = x + self.out(torch.einsum("bntl,blnd->btnd", attention, values).reshape(b, t, s.hidden))
            return x + self.down(F.gelu(self.up(self.norm2(x))))

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(s.vocab, s.hidden)
            self.blocks = nn.ModuleList(Layer() for _ in range(s.layers))
            self.norm, self.head = nn.LayerNorm(s.hidden), nn.Linear(s.hidden, s.vocab)

        def forward(self, tokens, positions, caches):
            x = self.embed(tokens)
            for block, cache in zip(self.blocks, caches):
                x = block(x, positions, cache)
            return self.head(self.norm(x[:, -1]))

    return Model()
