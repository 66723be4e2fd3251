"""Patch module (API server and in-process LLM): make rlprof's keys valid in ``--profiler-config`` and in-process dicts.

Release eras (docs/compatibility.md): vLLM 0.13+ has ``ProfilerConfig`` and
``--profiler-config`` (0.13-0.15 ignore unknown keys, 0.16+ reject them);
before 0.13 profiling is configured by ``VLLM_TORCH_PROFILER_*`` variables
only. There rlprof reads the same JSON keys from ``RLPROF_PROFILER_CONFIG``
(validated when vLLM builds its engine config) and never exports ``VLLM_*``
variables on any release.

vLLM 0.16+ builds ``ProfilerConfig`` as a pydantic dataclass that forbids
unknown keys, and ``LLM(profiler_config={...})`` silently drops keys it does
not know. These patches split our keys out before vLLM validates the rest and
validate them (naming the key, suggesting a fix for typos); how, and where the
result is kept, is the ``config`` helper's.
"""

from __future__ import annotations

import argparse
import json

from rlprof_plugins._log import warn_once
from rlprof_plugins.backends import memory_history
from rlprof_plugins.config.launch_config import ENV as ENV_CONFIG
from rlprof_plugins.config.launch_config import from_environment
from rlprof_plugins.config.options import OUR_KEYS, split_options
from rlprof_plugins.errors import OptionsError

from ..base import Patch
from .. import features
from . import weight_reader
from .config import PROFILER_CONFIG_FIELDS, announce_server, attach, build_profiler_config, device, native_keys
from .facts import CONFIG_VERSIONS, ENV_ERA_VERSIONS


# ---- CLI: --profiler-config JSON and the dotted --profiler-config.KEY form --
def _typed(native_type):
    def parse_profiler_config(value: str):
        from vllm.config import ProfilerConfig

        try:
            data = json.loads(value)
        except (TypeError, ValueError):
            return native_type(value)
        if not isinstance(data, dict):
            return native_type(value)
        try:
            native, ours = split_options(data, native_keys(ProfilerConfig))
            cfg = native_type(json.dumps(native))
            return attach(cfg, ours, native)
        except OptionsError as e:
            raise argparse.ArgumentTypeError(str(e)) from e

    parse_profiler_config._rlprof_native = native_type  # type: ignore[attr-defined]
    return parse_profiler_config


def _wrap_add_cli_args(wrapped, instance, args, kwargs):
    parser = wrapped(*args, **kwargs)
    try:
        for action in parser._actions:
            if action.dest == "profiler_config" and not hasattr(action.type, "_rlprof_native"):
                action.type = _typed(action.type)
    except Exception as e:  # the parser must still work without our keys
        warn_once("cli", "rlprof: %s are off: could not extend --profiler-config: %s", features.CONFIG_KEYS, e)
    return parser


def _wrap_create_engine_config(wrapped, instance, args, kwargs):
    # AsyncEngineArgs(profiler_config={...}) (verl's in-process path) keeps the
    # dict until here; convert it so our keys are validated, not rejected.
    if isinstance(getattr(instance, "profiler_config", None), dict):
        instance.profiler_config = build_profiler_config(instance.profiler_config)
    return wrapped(*args, **kwargs)


def _wrap_llm_init(wrapped, instance, args, kwargs):
    value = kwargs.get("profiler_config")
    if isinstance(value, dict):
        kwargs = dict(kwargs, profiler_config=build_profiler_config(value))
    return wrapped(*args, **kwargs)


def _wrap_create_engine_config_env_era(wrapped, instance, args, kwargs):
    # vLLM < 0.13 has no --profiler-config: validate RLPROF_PROFILER_CONFIG
    # here, so a bad key stops the launch before the model loads.
    try:
        config = from_environment()
        if config is not None:
            weight_reader.check_release(config.options)
            memory_history.check_configured(config.options, device())
            announce_server(config.options)
            config.server_root()  # the directory claimed (or this server's folder below it chosen) at start-up
    except OptionsError as e:
        raise ValueError(f"${ENV_CONFIG}: {e}") from None
    return wrapped(*args, **kwargs)


ENV_CONFIG_PATCH = Patch(
    name="vllm.profiler_config.env_era",
    engine="vllm",
    versions=ENV_ERA_VERSIONS,
    module="vllm.engine.arg_utils",
    feature=features.ENV_CONFIG,
    why=("vLLM < 0.13 is configured by VLLM_TORCH_PROFILER_* only; validate rlprof's JSON in "
         "RLPROF_PROFILER_CONFIG when the engine config is built, naming a bad key"),
    upstream="ProfilerConfig (vLLM 0.13)",
    wrap={"EngineArgs.create_engine_config": _wrap_create_engine_config_env_era},
    area="vllm.config",
)

ARG_PATCH = Patch(
    name="vllm.profiler_config.engine_args",
    engine="vllm",
    versions=CONFIG_VERSIONS,
    module="vllm.engine.arg_utils",
    feature=features.CONFIG_KEYS,
    why=(
        "ProfilerConfig forbids unknown keys; wrap the --profiler-config parser "
        "and the dict path of AsyncEngineArgs to accept and validate "
        + ", ".join(OUR_KEYS)
    ),
    upstream="a ProfilerConfig extension point for plugin keys",
    area="vllm.config",
    wrap={
        "EngineArgs.add_cli_args": _wrap_add_cli_args,
        "EngineArgs.create_engine_config": _wrap_create_engine_config,
    },
    relies_on={"EngineArgs": "fields:profiler_config", "vllm.config:ProfilerConfig": PROFILER_CONFIG_FIELDS},
)

LLM_CONFIG_PATCH = Patch(
    name="vllm.profiler_config.llm",
    engine="vllm",
    versions=CONFIG_VERSIONS,
    module="vllm.entrypoints.llm",
    feature=features.CONFIG_KEYS,
    why="LLM(profiler_config={...}) drops keys ProfilerConfig does not declare",
    upstream="the same extension point",
    wrap={"LLM.__init__": _wrap_llm_init},
    area="vllm.config",
    # LLM.__init__ gains parameters every release; the wrapper only reads profiler_config.
    relies_on={"LLM.__init__": "params:profiler_config", "vllm.config:ProfilerConfig": PROFILER_CONFIG_FIELDS},
)

PATCHES = (ENV_CONFIG_PATCH, ARG_PATCH, LLM_CONFIG_PATCH)
