"""Parse one start request (HTTP body or in-process keyword arguments).

A start request may carry ``global_step`` (which folder the session writes
to) and per-request overrides of the window keys. Server defaults come from
``ProfileOptions``; this module merges them and validates the result, raising
``RequestError`` naming the field so the HTTP layer answers 400 before
anything is written.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

from .errors import RequestError
from .options import ProfileOptions, check_count, check_flag, check_window

# Fields our start request understands, next to the engine's native ones.
START_FIELDS = ("global_step", "step_start", "step_end", "by_stage")
# vLLM 0.33's per-session torch.profiler keywords (``profiler_kwargs``), as the
# TorchSettings field each one sets. rlprof accepts them on every release and
# on SGLang; any other key is refused (vLLM would hand it to torch.profiler).
PROFILER_KWARGS = {"record_shapes": "record_shapes", "profile_memory": "with_memory", "with_stack": "with_stack",
                   "with_flops": "with_flops", "with_modules": "with_modules"}


def parse_profiler_kwargs(value: Any) -> dict[str, bool]:
    """``profiler_kwargs`` as TorchSettings overrides; a bad key or value names it."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise RequestError("profiler_kwargs", f"must be an object of torch.profiler settings, got {value!r}")
    out = {}
    for key, flag in value.items():
        if key not in PROFILER_KWARGS:
            raise RequestError(f"profiler_kwargs.{key}", "not a per-session setting rlprof records; accepted: "
                                                         + ", ".join(PROFILER_KWARGS))
        out[PROFILER_KWARGS[key]] = check_flag(f"profiler_kwargs.{key}", flag, error=RequestError)
    return out


@dataclass(frozen=True)
class StartRequest:
    """Everything a worker needs to run one session."""

    global_step: int | None
    step_start: int
    step_end: int | None
    profile_prefix: str | None = None
    by_stage: bool = False
    operator_table: bool = False
    keep_last_steps: int | None = None
    merge: bool = False
    # Where this session's folders go when the engine takes it per request
    # (SGLang's ``output_dir``); None: the configured directory.
    output_dir: str | None = None
    # Per-request torch.profiler settings (SGLang's ``activities``,
    # ``with_stack``, ``record_shapes``; vLLM's ``profiler_kwargs``), over
    # the configured ones, as TorchSettings field names.
    torch_overrides: dict[str, Any] | None = None
    session_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    def to_command(self) -> dict[str, Any]:
        return {"op": "start", **asdict(self)}


def build_start_request(
    defaults: ProfileOptions,
    *,
    global_step: Any = None,
    step_start: Any = None,
    step_end: Any = None,
    step_end_given: bool = False,
    profile_prefix: str | None = None,
    by_stage: Any = None,
    profiler_kwargs: Any = None,
) -> StartRequest:
    """Merge request overrides over server defaults and validate.

    ``step_end_given`` distinguishes an explicit ``"step_end": null`` (record
    until stop) from an absent field (keep the server default).
    """
    gs = check_count("global_step", global_step, allow_none=True, error=RequestError)
    start = defaults.step_start if step_start is None else check_count("step_start", step_start, error=RequestError)
    if step_end_given or step_end is not None:
        end = check_count("step_end", step_end, allow_none=True, error=RequestError)
    else:
        end = defaults.step_end
    assert start is not None
    check_window(start, end, error=RequestError)
    if by_stage is not None:
        check_flag("by_stage", by_stage, error=RequestError)
    overrides = parse_profiler_kwargs(profiler_kwargs)
    return StartRequest(
        global_step=gs,
        step_start=start,
        step_end=end,
        profile_prefix=profile_prefix,
        by_stage=defaults.by_stage if by_stage is None else by_stage,
        operator_table=defaults.operator_table,
        keep_last_steps=defaults.keep_last_steps,
        merge=defaults.merge,
        torch_overrides=overrides or None,
    )


def parse_start_body(
    body: Mapping[str, Any], defaults: ProfileOptions, native_fields: tuple[str, ...]
) -> tuple[StartRequest, dict[str, Any]]:
    """Validate an HTTP start body: returns our request and the native fields.

    Unknown fields are rejected (a misspelt ``global_stpe`` would otherwise
    silently write to the wrong folder).
    """
    if not isinstance(body, Mapping):
        raise RequestError("body", f"must be a JSON object, got {type(body).__name__}")
    for key in body:
        if key not in START_FIELDS and key not in native_fields:
            raise RequestError(key, f"unknown field; accepted: {', '.join(START_FIELDS + native_fields)}")
    native = {k: body[k] for k in native_fields if k in body and body[k] is not None}
    prefix = native.get("profile_prefix")
    if prefix is not None and not isinstance(prefix, str):
        raise RequestError("profile_prefix", f"must be a string, got {prefix!r}")
    request = build_start_request(
        defaults,
        global_step=body.get("global_step"),
        step_start=body.get("step_start"),
        step_end=body.get("step_end"),
        step_end_given="step_end" in body,
        profile_prefix=prefix,
        by_stage=body.get("by_stage"),
        profiler_kwargs=native.get("profiler_kwargs"),
    )
    return request, native
