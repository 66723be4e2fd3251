"""``--profiler-config`` for engines that have no profiler config of their own.

vLLM parses its ``--profiler-config`` itself (we only add our keys to it).
SGLang has no profiling server arguments, so for it rlprof parses the whole
JSON: the same torch keys as vLLM 0.32 (``torch_profiler_dir``,
``torch_profiler_with_stack``, ...) with the same defaults, plus rlprof's
keys (``step_start``, ``by_stage``, ``merge``, ...). One JSON means the same
thing on both engines, and on both a JSON that writes neither
``torch_profiler_with_stack`` nor ``python_stacks`` records sampled stacks
(``torch_profiler.DEFAULT_STACKS``).

The validated config travels to the engine's other processes (SGLang's
schedulers are spawned) in ``RLPROF_PROFILER_CONFIG``, which users may also
set themselves where no server argument can be added (``sglang.Engine``,
releases without a plugin hook).
"""

from __future__ import annotations

import difflib
import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from ..backends.torch_profiler import (DEFAULT_STACKS, NATIVE_DEFAULTS, TorchSettings, check_against_native,
                                       settings_from_config, stacks_unsaid)
from ..errors import OptionsError
from ..store.servers import server_root
from .options import OUR_KEYS, ProfileOptions, check_directory, check_flag, parse_options

ENV = "RLPROF_PROFILER_CONFIG"

# Activity names as vLLM spells them; "GPU" is SGLang's name for CUDA.
ACTIVITIES = ("CPU", "CUDA", "XPU")
ACTIVITY_ALIASES = {"GPU": "CUDA"}

_FLAGS = NATIVE_DEFAULTS  # key: default, vLLM's for the same keys
TORCH_KEYS = ("profiler", "torch_profiler_dir", "torch_profiler_activities", *_FLAGS)
ALL_KEYS = TORCH_KEYS + OUR_KEYS
PROFILERS = ("torch", "cuda")  # "cuda": Nsight Systems records, rlprof marks (backends.cuda_profiler)


@dataclass(frozen=True)
class ProfilerConfig:
    """What a server was configured to record, and where."""

    torch_profiler_dir: str | None = None
    torch_profiler_activities: tuple[str, ...] | None = None  # None: CPU, plus CUDA when present
    torch_profiler_with_stack: bool = _FLAGS["torch_profiler_with_stack"]
    torch_profiler_record_shapes: bool = _FLAGS["torch_profiler_record_shapes"]
    torch_profiler_with_memory: bool = _FLAGS["torch_profiler_with_memory"]
    torch_profiler_with_flops: bool = _FLAGS["torch_profiler_with_flops"]
    torch_profiler_use_gzip: bool = _FLAGS["torch_profiler_use_gzip"]
    profiler: str = "torch"
    options: ProfileOptions = field(default_factory=ProfileOptions)

    def server_root(self) -> str | None:
        """Where this server's step folders and step logs go: ``torch_profiler_dir``, or this server's
        own folder below it where another server already writes there (``store.servers``)."""
        return str(server_root(self.torch_profiler_dir)) if self.torch_profiler_dir else None

    def to_json(self) -> str:
        data = {k: v for k, v in asdict(self).items() if k != "options"}
        data.update(self.options.to_dict())
        return json.dumps(data, sort_keys=True)

    def torch_settings(self, *, cuda_available: bool, overrides: Mapping[str, Any] | None = None) -> TorchSettings:
        """The torch.profiler settings of one session (request fields win)."""
        return settings_from_config(self, default_activities=("CPU", "CUDA") if cuda_available else ("CPU",),
                                    overrides=overrides, write_table=self.options.operator_table)


def parse_activities(key: str, value: Any, error=OptionsError) -> tuple[str, ...]:
    """A non-empty list of activity names; ``error`` lets request parsing reuse it."""
    if not isinstance(value, (list, tuple)) or not value or not all(isinstance(a, str) for a in value):
        raise error(key, f"must be a non-empty list of {', '.join(ACTIVITIES)}, got {value!r}")
    out = []
    for a in value:
        name = ACTIVITY_ALIASES.get(a.upper(), a.upper())
        if name not in ACTIVITIES:
            raise error(key, f"unsupported activity {a!r}; supported: {', '.join(ACTIVITIES)} (GPU means CUDA)")
        if name not in out:
            out.append(name)
    return tuple(out)


def check_activities_on_host(key: str, activities: tuple[str, ...], device: str, error=OptionsError) -> None:
    """Refuse device activities this host cannot record (``device``: ``cuda``,
    ``npu``, ``xpu`` or ``cpu``, as ``backends.which_backend.device_type`` finds it).
    Without the device, torch.profiler records nothing for them and the
    session fails later ("No activities specified"); on Ascend, SGLang maps
    ``GPU`` to the NPU, so CUDA is accepted there."""
    have = {"cuda": {"CUDA"}, "npu": {"CUDA"}, "xpu": {"XPU"}}.get(device, set())
    missing = [a for a in activities if a != "CPU" and a not in have]
    if missing:
        raise error(key, f"asks for {', '.join(missing)} (GPU means CUDA), but this host has no such device "
                         f"(found: {device}); record [\"CPU\"] here")


def parse_profiler_config(data: str | Mapping[str, Any]) -> ProfilerConfig:
    """Validate a whole ``--profiler-config``; errors name the key."""
    if isinstance(data, str):
        try:
            data = json.loads(data) if data.strip() else {}
        except ValueError as e:
            raise OptionsError("(json)", f"not valid JSON: {e}") from None
    if not isinstance(data, Mapping):
        raise OptionsError("(json)", f"must be a JSON object, got {type(data).__name__}")
    for key in data:
        if key not in ALL_KEYS:
            close = difflib.get_close_matches(key, ALL_KEYS, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise OptionsError(key, f"unknown key{hint}; accepted: {', '.join(ALL_KEYS)}")
    profiler = data.get("profiler", "torch")
    if profiler not in PROFILERS:
        raise OptionsError("profiler", f"must be one of {', '.join(PROFILERS)}, got {profiler!r}")
    directory = data.get("torch_profiler_dir")
    if directory is not None and not isinstance(directory, str):
        raise OptionsError("torch_profiler_dir", f"must be a path, got {directory!r}")
    activities = data.get("torch_profiler_activities")
    flags = {key: check_flag(key, data.get(key, default)) for key, default in _FLAGS.items()}
    ours = {k: v for k, v in data.items() if k in OUR_KEYS}
    if profiler == "torch" and stacks_unsaid(data):  # sampled stacks, torch's tracer off (DEFAULT_STACKS)
        ours["python_stacks"] = DEFAULT_STACKS
    if ours.get("python_stacks") is not None and "torch_profiler_with_stack" not in data:
        # the flag as python_stacks means it, so the exported config (to_json) parses the same again
        flags["torch_profiler_with_stack"] = ours["python_stacks"] == "exact"
    options = parse_options(ours)
    check_against_native(data, data, OptionsError)
    if profiler == "cuda" and options.backend not in ("auto", "cuda"):
        raise OptionsError("backend", f'{options.backend!r} contradicts "profiler": "cuda"; leave backend at auto')
    directory = check_directory("torch_profiler_dir", directory) if directory else None
    if directory and options.output_dir and options.output_dir != directory:
        raise OptionsError("output_dir", f"is {options.output_dir!r} but torch_profiler_dir is {directory!r}: "
                                         "both name the root of the step folders; give one")
    return ProfilerConfig(
        torch_profiler_dir=directory or options.output_dir,
        torch_profiler_activities=None if activities is None else parse_activities("torch_profiler_activities", activities),
        profiler=profiler,
        options=options,
        **flags,
    )


def from_environment() -> ProfilerConfig | None:
    """The config handed down by the parsing process, or set by the user."""
    text = os.environ.get(ENV)
    if not text:
        return None
    return parse_profiler_config(text)


def options_from_environment() -> ProfileOptions:
    """rlprof's options where the engine has no profiler config of its own to carry them (a server a
    trainer gives only a folder): those of ``RLPROF_PROFILER_CONFIG`` where it is set and valid, else the
    defaults. An invalid one has already stopped the launch where it was parsed."""
    try:
        config = from_environment()
    except OptionsError:
        config = None
    return config.options if config is not None else parse_options({})


def export_to_environment(config: ProfilerConfig) -> None:
    """Hand the validated config to every process the engine spawns later."""
    global _exported
    _exported = os.environ[ENV] = config.to_json()


_exported: str | None = None  # what this process put into the environment itself


def user_overlay() -> dict[str, Any]:
    """``RLPROF_PROFILER_CONFIG`` as the user set it, to merge over the engine's
    own profiler configuration ({} when unset, or when this process exported it)."""
    text = os.environ.get(ENV)
    if not text or text == _exported:
        return {}
    try:
        data = json.loads(text)
    except ValueError as e:
        raise OptionsError(f"${ENV}", f"not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise OptionsError(f"${ENV}", f"must be a JSON object, got {type(data).__name__}")
    return data


def merge_over(engine: Mapping[str, Any], overlay: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The engine's profiler keys and ``RLPROF_PROFILER_CONFIG``'s together; a
    key both set to different values is refused naming it (one place per key)."""
    for key in engine.keys() & overlay.keys():
        if engine[key] != overlay[key]:
            raise OptionsError(key, f"is {engine[key]!r} in {source} but {overlay[key]!r} in ${ENV}; "
                                    "set it in one place")
    return {**overlay, **engine}
