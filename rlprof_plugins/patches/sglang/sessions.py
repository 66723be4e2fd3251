"""Helper: a session as SGLang's TokenizerManager side runs it, for every way in.

Not a patch module. ``start``, ``stop`` and ``status`` send one command to
every scheduler (``wire.send``) and fold the replies; a stop returns once the
files are written. The HTTP routes (``http``), ``TokenizerManager``'s own
methods (``tokenizer``) and ``sglang.Engine`` (``engine``) all come here, so
every way in runs the same session; whether a stop is SGLang's own is
decided here too (``stop_is_native``).
"""

# No "from __future__ import annotations": kept like http.py, whose FastAPI endpoints need real types.

import asyncio
from pathlib import Path
from typing import Any, Optional

from rlprof_plugins._log import session_event
from rlprof_plugins.config.launch_config import ProfilerConfig
from rlprof_plugins.config.options import ProfileOptions
from rlprof_plugins.config.request_fields import SGLANG, needs_rlprof
from rlprof_plugins.errors import ConflictError
from rlprof_plugins.session.protocol import (combine, ignored_as_native, roster_command, stop_wait_seconds,
                                             wait_until_written, with_step_manifest)
from rlprof_plugins.store import reaping

from . import request_keeper, weight_reader
from .start_requests import build_request, server_config
from .wire import send


_used = False  # this process started an rlprof session: stops go to rlprof too


def mark_used() -> None:
    """An rlprof session was started from this process (route or in-process call)."""
    global _used
    _used = True


def was_used() -> bool:
    return _used


def stop_is_native() -> bool:
    """Whether a stop is SGLang's own: no rlprof configuration, and no rlprof
    session started in this process (then only SGLang's profiler can be running)."""
    return server_config() is None and not was_used()


def uses_rlprof(body: dict) -> bool:
    """Whether a body needs rlprof on a server without rlprof configuration."""
    return needs_rlprof(SGLANG, body)


async def start(tokenizer_manager: Any, body: dict, config: Optional[ProfilerConfig]) -> dict:
    """An rlprof session from a start body (the route's or an in-process call's), on every scheduler."""
    request = build_request(body, config, weight_reader.reader(tokenizer_manager))
    await asyncio.to_thread(reaping.reap_all, Path(request.output_dir))
    try:
        result = combine(await send(tokenizer_manager, request.to_command()))
    except ConflictError as e:  # a second start: SGLang's own profiler answers it without starting anything
        if not request.engine_fields_only:
            raise
        return ignored_as_native(e, "start")
    roster = roster_command(result)
    if roster is not None:  # a server spanning nodes: each folder's manifest names where the others write
        await send(tokenizer_manager, roster)
    mark_used()
    session_event("started", result)
    return {**result, "warnings": list(request.warnings)} if request.warnings else result


async def stop(tokenizer_manager: Any, wait: Any = None) -> dict:
    """Stop the session on every scheduler; returns once its files are written (see ``until_written``)."""
    return await until_written(tokenizer_manager, await send(tokenizer_manager, {"op": "stop", "defer": True}), wait)


async def until_written(tokenizer_manager: Any, replies: list, wait: Any) -> dict:
    """The schedulers' stop replies as one status, once the files are written:
    polled from here (the schedulers keep serving), at most ``stop_wait_seconds``;
    ``wait`` false: at once."""
    config = server_config()
    timeout = stop_wait_seconds(config.options if config else ProfileOptions(), wait)
    try:
        result = with_step_manifest(combine(replies))
    except ConflictError as e:  # nothing running: SGLang's own profiler answers such a stop; ``wait`` is rlprof's
        if wait is not None:
            raise
        return ignored_as_native(e, "stop")
    if timeout:
        result = await wait_until_written(result, lambda step: status(tokenizer_manager, step), timeout)
    session_event("stopped", result)
    return result


async def mark_step(tokenizer_manager: Any, weights_version: int, *, trainer: str,
                    measure_dir: str | None = None) -> list:
    """A trainer integration's weight sync (verl's ``set_global_steps``): every scheduler's step
    metrics count for the version + ``trainer_step_offset`` from now on. ``measure_dir``: the trainer's
    folder for this server, where its step metrics go if it was launched without a profiler directory;
    the requests that held each step are followed there too."""
    command = {"op": "mark_step", "weights_version": weights_version, "trainer": trainer}
    if measure_dir is not None:
        command["measure_dir"] = measure_dir
        request_keeper.follow_at(tokenizer_manager, measure_dir)
    return await send(tokenizer_manager, command)


async def status(tokenizer_manager: Any, global_step: Optional[int]) -> dict:
    return with_step_manifest(combine(await send(tokenizer_manager, {"op": "status", "global_step": global_step})))
