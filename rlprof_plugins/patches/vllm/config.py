"""Helper: vLLM's profiler config as rlprof reads it, on every release era.

Not a patch module. Which configs rlprof handles (``plugin_handles``), the
session defaults of one (``options_of``), rlprof's keys split out of a
``ProfilerConfig`` dict and validated (``build_profiler_config``,
``attach``), the env-era config from ``RLPROF_PROFILER_CONFIG``, and what a
vLLM server contributes to a start request (``request_server``). The
``profiler_config`` patch module applies these to vLLM's argument parsing;
every other patch module reads configs through them.

Not an instance attribute: vLLM's ``config.utils.replace`` rejects unknown
``__dict__`` entries. The parsing process keeps a table keyed by the
instance; engine processes it spawns inherit the same options through
``RLPROF_OPTIONS``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Mapping

from rlprof_plugins.backends import memory_history
from rlprof_plugins.backends.torch_profiler import DEFAULT_STACKS, stacks_unsaid
from rlprof_plugins.config.launch_config import ENV as ENV_CONFIG
from rlprof_plugins.config.launch_config import ProfilerConfig as EnvProfilerConfig
from rlprof_plugins.config.launch_config import from_environment, merge_over, user_overlay
from rlprof_plugins.config.options import ProfileOptions, check_directory, parse_options, split_options
from rlprof_plugins.config.requests import Server
from rlprof_plugins.errors import OptionsError
from rlprof_plugins.store import servers

from . import weight_reader


ENV_OPTIONS = "RLPROF_OPTIONS"


# id(config) -> (config, options): the config is held so its id is never reused.
_options_by_config: dict[int, tuple[Any, dict[str, Any]]] = {}


# The ProfilerConfig fields rlprof reads (plugin_handles, options_of, the torch settings).
PROFILER_CONFIG_FIELDS = ("fields:profiler,torch_profiler_dir,delay_iterations,max_iterations,wait_iterations,"
                          "warmup_iterations,ignore_frontend,torch_profiler_activities,torch_profiler_with_stack,"
                          "torch_profiler_record_shapes,torch_profiler_with_memory,torch_profiler_with_flops,"
                          "torch_profiler_use_gzip")


def env_profiler_config() -> EnvProfilerConfig | None:
    """The env-era config (vLLM < 0.13), or None when unset or invalid
    (an invalid one already stopped the launch; see ``ENV_CONFIG_PATCH``).
    Read on start/stop/status calls only, never per iteration."""
    try:
        return from_environment()
    except OptionsError:
        return None


def profiler_config_of(vllm_config: Any) -> Any:
    """The profiler config of this engine: vLLM's own (0.13+) or, on the env
    era, rlprof's from ``RLPROF_PROFILER_CONFIG`` (same attribute names)."""
    cfg = getattr(vllm_config, "profiler_config", None)
    return cfg if cfg is not None else env_profiler_config()


def native_keys(config_cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(config_cls)]


def plugin_handles(cfg: Any) -> bool:
    """Whether rlprof runs the sessions of this profiler config.

    The torch profiler writing to a directory (a local one, or an object store URI written through the
    node's spool: ``store.destination``), and the cuda profiler
    (Nsight Systems: rlprof marks the windows with NVTX ranges and capture
    ranges, ``backends.cuda_profiler``), each without vLLM's own
    torch.profiler schedule (wait/warmup iterations), are taken over; any
    other configuration keeps vLLM's native path untouched.
    """
    profiler = getattr(cfg, "profiler", None)
    if profiler == "torch":
        if not getattr(cfg, "torch_profiler_dir", None):
            return False
    elif profiler != "cuda":
        return False
    return not (getattr(cfg, "wait_iterations", 0) or getattr(cfg, "warmup_iterations", 0))


DEFAULT_ROOT = "/tmp"  # where a config naming no directory puts its step folders (SGLang's default)


def root_of(cfg: Any) -> str:
    """The root of this server's step folders: ``torch_profiler_dir``, else (the cuda profiler, where
    vLLM refuses that key) rlprof's ``output_dir``, else ``/tmp``; where another server already writes
    there, this server's own folder below it (``store.servers.server_root``)."""
    configured = getattr(cfg, "torch_profiler_dir", None) or options_of(cfg).output_dir or DEFAULT_ROOT
    return str(servers.server_root(configured))


def _flag(argv: list[str], flag: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def announce_server(options: ProfileOptions, argv: list[str] | None = None) -> str:
    """This server's identity, set in the process that parses its configuration (before vLLM starts
    its engine processes, which inherit it): ``server_name``, else ``RLPROF_SERVER_NAME``, else the
    host and the API server's ``--port`` (8000 for ``vllm serve`` without one; a server spanning
    nodes: ``--master-addr`` and ``--master-port``, which every node is given), else this process."""
    import sys

    argv = list(sys.argv if argv is None else argv)
    head = None
    try:
        if int(_flag(argv, "--nnodes") or 1) > 1 and _flag(argv, "--master-addr"):
            head = f"{_flag(argv, '--master-addr')}-{_flag(argv, '--master-port') or ''}"
    except ValueError:
        head = None
    port = _flag(argv, "--port")
    if port is None and "serve" in argv[1:3]:
        port = "8000"
    return servers.announce(options.server_name, port=int(port) if port and port.isdigit() else None, head=head)


def options_of(cfg: Any) -> ProfileOptions:
    """Effective server defaults for sessions of ``cfg``.

    Without our keys, vLLM's native ``delay_iterations``/``max_iterations``
    map onto the same window (recording skips exactly ``delay`` iterations;
    native vLLM skips one fewer).
    """
    if isinstance(cfg, EnvProfilerConfig):
        return cfg.options
    entry = _options_by_config.get(id(cfg))
    if entry is not None and entry[0] is cfg:
        explicit = entry[1]
    elif not _options_by_config and ENV_OPTIONS in os.environ:
        # An engine process: the front end that parsed the config set this.
        explicit = json.loads(os.environ[ENV_OPTIONS])
    else:
        explicit = None
    options = ProfileOptions.from_dict(explicit) if explicit else ProfileOptions()
    delay = getattr(cfg, "delay_iterations", 0) or 0
    limit = getattr(cfg, "max_iterations", 0) or 0
    if delay or limit:  # vLLM's own window; start-up refused it beside rlprof's keys (the default stacks aside)
        options = dataclasses.replace(options, step_start=delay, step_end=delay + limit if limit else None)
    return options


def validate_prefix(prefix: Any) -> None:
    """vLLM's rule for a trace-name prefix (``validate_profile_prefix``, 0.32+);
    the same rule on releases without it (the prefix becomes a file name)."""
    try:
        from vllm.config.profiler import validate_profile_prefix
    except ImportError:
        validate_profile_prefix = None
    if validate_profile_prefix is not None:
        validate_profile_prefix(prefix)
    elif prefix is not None and (
        not isinstance(prefix, str) or not 1 <= len(prefix) <= 128 or not prefix.isascii()
        or not prefix[0].isalnum() or any(not (c.isalnum() or c in "._-") for c in prefix[1:])
    ):
        raise ValueError("profile_prefix must be 1-128 ASCII characters, start with a letter or number, "
                         "and contain only letters, numbers, '.', '_', or '-'")


def device() -> str:
    from vllm.platforms import current_platform
    return getattr(current_platform, "device_type", "cpu") or "cpu"


def request_server(cfg: Any) -> Server:
    """What a vLLM server contributes to a start request's meaning (``requests.parse_start``)."""
    return Server(engine="vllm", defaults=options_of(cfg), output_root=root_of(cfg), device=device(),
                  check_prefix=validate_prefix)


def _check_compatible(cfg: Any, ours: Mapping[str, Any]) -> None:
    if not ours:
        return
    key = next(iter(ours))
    if cfg.profiler not in ("torch", "cuda"):
        raise OptionsError(key, f"needs \"profiler\": \"torch\" or \"cuda\" (got {cfg.profiler!r})")
    if cfg.profiler == "torch" and "output_dir" in ours:
        raise OptionsError("output_dir", "is for a profiler with no directory of its own (\"cuda\"); with "
                                         "\"torch\", torch_profiler_dir names the root of the step folders")
    if cfg.profiler == "cuda" and ours.get("backend", "auto") not in ("auto", "cuda"):
        raise OptionsError("backend", f'{ours["backend"]!r} contradicts "profiler": "cuda"; leave backend at auto')
    for native in ("delay_iterations", "max_iterations", "wait_iterations", "warmup_iterations"):
        if getattr(cfg, native, 0):
            raise OptionsError(key, f"cannot be combined with {native}; use step_start/step_end alone")


def with_user_overlay(cfg: Any, ours: Mapping[str, Any]) -> dict[str, Any]:
    """``ours`` with the rlprof keys of ``RLPROF_PROFILER_CONFIG`` merged in, for
    frameworks that build ``--profiler-config`` themselves (verl). vLLM's own
    keys stay vLLM's: one there must equal the engine's value, or start-up stops
    naming it."""
    overlay = user_overlay()
    if not overlay:
        return dict(ours)
    native, extra = split_options(overlay, native_keys(type(cfg)))
    for key, value in native.items():
        if getattr(cfg, key, None) != value:
            raise OptionsError(key, f"is {getattr(cfg, key, None)!r} in vLLM's profiler config but {value!r} in "
                                    f"${ENV_CONFIG}; vLLM's own keys go in --profiler-config, rlprof's may go in either")
    return merge_over(ours, extra, "--profiler-config")


def attach(cfg: Any, ours: Mapping[str, Any], native: Mapping[str, Any]) -> Any:
    """rlprof's keys (``ours``) for ``cfg``, built from the JSON's ``native`` keys; checked, kept by
    the config's id and handed to the engine processes."""
    ours = with_user_overlay(cfg, ours)
    _check_compatible(cfg, ours)
    if getattr(cfg, "profiler", None) == "torch" and stacks_unsaid(native, ours, user_overlay()):
        ours = {**ours, "python_stacks": DEFAULT_STACKS}  # a configuration silent on stacks: sampled
    options = parse_options(ours)
    weight_reader.check_release(options)
    memory_history.check_configured(options, device())
    explicit = options.to_dict() if ours else {}
    _options_by_config[id(cfg)] = (cfg, explicit)
    os.environ[ENV_OPTIONS] = json.dumps(explicit)
    announce_server(options)
    if plugin_handles(cfg):
        if getattr(cfg, "profiler", None) == "torch":  # a URI this install cannot reach fails here, naming the extra
            check_directory("torch_profiler_dir", cfg.torch_profiler_dir)
        root_of(cfg)  # the directory claimed (or this server's folder below it chosen) at start-up
    return cfg


def build_profiler_config(data: Mapping[str, Any]) -> Any:
    """A ``ProfilerConfig`` from a dict holding native and rlprof keys."""
    from vllm.config import ProfilerConfig

    native, ours = split_options(data, native_keys(ProfilerConfig))
    return attach(ProfilerConfig(**native), ours, native)
