"""verl's in-process SGLang profiling sequence, run as its own process.

Source: volcengine/verl ``verl/workers/rollout/sglang_rollout/async_sglang_server.py``
(shared engine notes, section 7): ``await
tokenizer_manager.start_profile(**build_sglang_profiler_args(...))`` with
``output_dir``, ``with_stack``, ``record_shapes``, ``start_step=None``,
``num_steps=None`` (the keyword form), generation, then ``await
tokenizer_manager.stop_profile()``; verl reads the folder right after.

Usage: ``python verl_sglang.py MODEL OUTPUT_DIR`` with .venv-sglang's Python.
Prints ``RESULT {json}``: how the start ended, the traces on disk when the
stop returned and a few seconds later.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def traces(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*.trace.json.gz"))


def main(model: str, out: Path) -> dict:
    import sglang

    engine = sglang.Engine(model_path=model, device="cpu", attention_backend="torch_native",
                           sampling_backend="pytorch", context_length=256, max_total_tokens=4096,
                           max_running_requests=4, dtype="float32", disable_cuda_graph=True, grammar_backend="none",
                           skip_server_warmup=True, log_level="error")
    manager = engine.tokenizer_manager
    result: dict = {}
    try:
        profile_args = {"output_dir": str(out), "with_stack": False, "record_shapes": False,
                        "start_step": None, "num_steps": None}
        try:
            engine.loop.run_until_complete(manager.start_profile(**profile_args))
            result["start"] = "ok"
        except Exception as e:  # native SGLang >= 0.5.15: the keyword form raises TypeError
            result["start"] = f"{type(e).__name__}: {e}"
        engine.generate("the rollout engine", {"max_new_tokens": 6, "ignore_eos": True, "temperature": 0})
        if result["start"] == "ok":
            engine.loop.run_until_complete(manager.stop_profile())
            result["at_return"] = traces(out)
            time.sleep(3)
            result["later"] = traces(out)
    finally:
        engine.shutdown()
    return result


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1], Path(sys.argv[2]))), flush=True)
