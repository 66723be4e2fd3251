"""Patch module (launcher process): a ``--profiler-config '{...}'`` server argument.

SGLang has no profiling server arguments. This patch adds one that takes the
same JSON as vLLM's (``torch_profiler_dir``, ``step_start``, ``by_stage``,
``merge``, ...; see ``rlprof_plugins.config.launch_config``), validates it while
the arguments are parsed (a bad key stops the launch with a message naming
it) and hands it to the scheduler processes, which SGLang spawns later,
through ``RLPROF_PROFILER_CONFIG``. Where no argument can be added, that
variable is the documented way in.
"""

from __future__ import annotations

import argparse
import json
import os

from rlprof_plugins.backends import memory_history, which_backend
from rlprof_plugins.errors import OptionsError
from rlprof_plugins.store import servers
from rlprof_plugins.config.launch_config import (ENV, export_to_environment, from_environment, merge_over,
                                            parse_profiler_config, user_overlay)

from ..base import Patch
from ..features import SERVER_ARGUMENT
from ..bypassing_frontends import warn_in_use
from .facts import FRONTENDS, GRPC_MODE_ENV, TITLE, VERSIONS, version

FLAG = "--profiler-config"
DEST = "rlprof_profiler_config"
HELP = (
    "rlprof: profiling configuration as JSON, the same keys as vLLM's --profiler-config "
    '(e.g. \'{"torch_profiler_dir": "/traces", "step_start": 2, "step_end": 6, "merge": true}\'). '
    f"Also read from ${ENV}."
)


def _add_cli_args(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    parser = args[0] if args else kwargs.get("parser")
    if isinstance(parser, argparse.ArgumentParser) and FLAG not in parser._option_string_actions:
        parser.add_argument(FLAG, dest=DEST, type=str, default=None, help=HELP)
    return result


def _merged(text: str) -> str | dict:
    """``--profiler-config`` with a user-set ``RLPROF_PROFILER_CONFIG`` merged under it
    (a key both set differently is refused naming it)."""
    overlay = user_overlay()
    if not overlay:
        return text
    parse_profiler_config(text)  # the flag's own JSON first: its errors name its keys
    return merge_over(json.loads(text), overlay, FLAG)


def _from_cli_args(wrapped, instance, args, kwargs):
    # a classmethod's function: (cls, args) or, bound by wrapt, (args,)
    namespace = args[-1] if args else kwargs.get("args")
    text = getattr(namespace, DEST, None)
    try:
        config = parse_profiler_config(_merged(text)) if text is not None else from_environment()
        if config is not None:
            which_backend.resolve(config.options.backend, getattr(namespace, "device", None) or "")
            memory_history.check_configured(config.options, getattr(namespace, "device", None) or which_backend.device_type())
    except OptionsError as e:
        source = FLAG if text is not None else f"${ENV}"
        # SystemExit: the launch stops with this one line, as argparse errors do.
        raise SystemExit(f"error: {source}: {e}") from None
    if config is not None:
        export_to_environment(config)  # validated; the schedulers spawned later read it
        announce_server(config, namespace)
    if getattr(namespace, "smg_grpc_mode", False) or getattr(namespace, "grpc_mode", False):
        announce_grpc_mode()
    return wrapped(*args, **kwargs)


def announce_server(config, namespace) -> str:
    """This server's identity, in the launcher before its schedulers start (they inherit it):
    ``server_name``, else ``RLPROF_SERVER_NAME``, else the host and the HTTP ``port`` (a server
    spanning nodes: ``dist_init_addr``, which every node is given)."""
    nnodes = int(getattr(namespace, "nnodes", 1) or 1)
    head = getattr(namespace, "dist_init_addr", None) if nnodes > 1 else None
    port = getattr(namespace, "port", None)
    name = servers.announce(config.options.server_name, port=port if isinstance(port, int) else None, head=head)
    config.server_root()  # the directory claimed (or this server's folder below it chosen) at start-up
    return name


def announce_grpc_mode() -> None:
    """gRPC mode is a server argument: say so in the schedulers' environment (their plugin warns on
    load) and warn here, in the launcher, whose plugin loaded before the arguments were read."""
    os.environ[GRPC_MODE_ENV] = "1"
    warn_in_use(TITLE, FRONTENDS, version)


SERVER_ARGS_PATCH = Patch(
    name="sglang.server_args.profiler_config",
    engine="sglang",
    versions=VERSIONS,
    module="sglang.srt.server_args",
    feature=SERVER_ARGUMENT,
    why="SGLang has no profiling server arguments; rlprof's keys need a place next to the launch flags",
    upstream="a profiler config server argument (or plugin-declared arguments)",
    wrap={"ServerArgs.add_cli_args": _add_cli_args, "ServerArgs.from_cli_args": _from_cli_args},
)

PATCHES = (SERVER_ARGS_PATCH,)
