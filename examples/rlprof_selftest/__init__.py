"""The GPU proof kit's self-test: does profiling work on this machine, and what does it cost? No engine needed.

``python -m rlprof_selftest`` (run from ``examples/``, or from the kit folder
``examples/gpu_check.py kit`` builds: docs/gpu.md) is the first thing to run on
a new GPU or NPU box, with rlprof-plugins and torch installed. It serves a small
random-weight transformer (``model.py``: prefill eager, decode from a
captured CUDA graph on CUDA) as a rollout engine would, and records it
through rlprof's own session path, the one the engine patches drive: a
start request parsed as a server parses it, the workers' controller, the
backend the device gets (torch.profiler, or torch_npu on Ascend), chunks
sized by their cost, stage traces, the export off the "engine" thread, the
stitch, and the device memory snapshot where the device keeps an allocator
history. Then it checks what landed (``rlprof check`` on every trace, the
summary) and prints what worked and what each part cost: the start, every
pause on the engine thread, the export, the memory snapshot's dump, the trace
bytes per iteration, and the kernels and flow events the trace holds.

Exit 0 when every part that applies to the device worked, 1 otherwise, 2 on
a bad argument. It is a test of rlprof, kept beside the kit rather than in the
package users install; it reads rlprof's modules as they are installed.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

DEVICES = ("auto", "cuda", "npu", "cpu")


@dataclass
class Part:
    name: str
    state: str  # "ok", "failed" or "skipped"
    detail: str = ""


@dataclass
class SelfTest:
    device: str
    describe: str
    folder: Path
    parts: list[Part] = field(default_factory=list)
    costs: dict[str, Any] = field(default_factory=dict)

    def add(self, name: str, ok: bool | None, detail: str = "") -> None:
        self.parts.append(Part(name, "skipped" if ok is None else "ok" if ok else "failed", detail))

    @property
    def ok(self) -> bool:
        return all(p.state != "failed" for p in self.parts)

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "describe": self.describe, "folder": str(self.folder), "ok": self.ok,
                "parts": [vars(p) for p in self.parts], "costs": self.costs}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m rlprof_selftest", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=DEVICES, default="auto", help="default: npu, else cuda, else cpu")
    p.add_argument("--out", default="rlprof-selftest", help="the trace root to write global_step_0/ into "
                                                            "(default ./rlprof-selftest)")
    p.add_argument("--decode", type=int, default=24, metavar="N", help="decode iterations per round (default 24)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    args = p.parse_args(argv)
    if args.decode < 1:
        p.error("--decode: at least 1")
    try:
        device = resolve_device(args.device)
    except LookupError as e:
        p.error(str(e))
    result = run(device, Path(args.out), decode=args.decode)
    print(json.dumps(result.to_json(), indent=2) if args.json else render(result))
    return 0 if result.ok else 1


def resolve_device(asked: str) -> str:
    import importlib.util

    import torch

    npu = importlib.util.find_spec("torch_npu") is not None
    if npu:
        import torch_npu  # noqa: F401  (registers torch.npu)
    have = {"npu": npu and torch.npu.is_available(), "cuda": torch.cuda.is_available(), "cpu": True}
    if asked == "auto":
        return next(d for d in ("npu", "cuda", "cpu") if have[d])
    if not have[asked]:
        raise LookupError(f"--device {asked}: no such device here (torch {torch.__version__} sees "
                          f"{', '.join(d for d, ok in have.items() if ok)})")
    return asked


def run(device: str, out: Path, *, decode: int = 24, rounds: int = 3, allocator: Callable[[], Any] | None = None,
        memory: bool | None = None) -> SelfTest:
    """Serve ``rounds`` of (one prefill, ``decode`` decodes) unprofiled, then the same profiled into
    ``out/global_step_0``. ``allocator``/``memory``: the memory history's allocator and whether to
    record it (default: where the device keeps one)."""
    from rlprof_plugins.backends import memory_history
    from .model import build
    from .session import record_session, rollout_cost

    engine = build(device)
    test = SelfTest(device, _describe(engine), (out / "global_step_0").resolve())
    memory_why = memory_history.unavailable(device) if allocator is None else None
    memory = (memory_why is None) if memory is None else memory
    schedule = (["prefill"] + ["decode"] * decode) * rounds
    engine.serve(schedule)  # warm-up: first kernels, graph capture
    test.add("CUDA graph decode", True if engine.uses_graphs else None,
             "decode replays one captured graph" if engine.uses_graphs else f"{device}: decode runs eager")
    plain = engine.serve(schedule)
    record_session(test, engine, schedule, out, memory=memory, allocator=allocator or memory_history.host_allocator,
                   plain=plain, memory_why=memory_why)
    rollout_cost(test, engine, schedule, allocator or memory_history.host_allocator)
    return test


def _describe(engine: Any) -> str:
    torch = engine.torch
    if engine.device == "cuda":
        name = torch.cuda.get_device_name()
    elif engine.device == "npu":
        name = torch.npu.get_device_name()
    else:
        name = "CPU"
    return f"{name}, torch {torch.__version__}"


def render(test: SelfTest) -> str:
    from rlprof_plugins import __version__

    lines = [f"rlprof self-test: {test.device} ({test.describe}), rlprof-plugins {__version__}", ""]
    width = max(len(p.name) for p in test.parts)
    for p in test.parts:
        lines.append(f"  {p.state:<8} {p.name:<{width}}  {p.detail}")
    lines += ["", "what it costs:"]
    width = max((len(k) for k in test.costs), default=0)
    lines += [f"  {k:<{width}}  {v}" for k, v in test.costs.items()]
    verdict = "everything that applies here works" if test.ok else "FAILED"
    lines += ["", f"step folder: {test.folder}", f"verdict: {verdict}"]
    return "\n".join(lines)
