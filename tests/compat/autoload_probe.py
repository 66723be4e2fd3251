"""Is the SGLang plugin loaded in a process that imports SGLang, and in a
process SGLang would spawn from it? Run by contract_sglang.py:

    python -m tests.compat.autoload_probe   # prints {"parent": bool, "child": bool}
"""

import json
import multiprocessing as mp


def _loaded() -> bool:
    from tests.compat.release_env import adapt

    adapt("sglang")
    import importlib

    importlib.import_module("sglang.srt.server_args")  # what every SGLang process imports first
    from rlprof_plugins.patches.sglang.server_args import SERVER_ARGS_PATCH

    return SERVER_ARGS_PATCH.applied


def _child(queue) -> None:
    queue.put(_loaded())


def main() -> None:
    parent = _loaded()
    ctx = mp.get_context("spawn")  # as SGLang starts its schedulers
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(queue,))
    proc.start()
    child = queue.get(timeout=300)
    proc.join()
    print(json.dumps({"parent": parent, "child": child}))


if __name__ == "__main__":
    main()
