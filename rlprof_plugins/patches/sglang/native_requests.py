"""Helper: a profile request that reached a configured scheduler without rlprof's route, as an rlprof command.

On a server configured for rlprof, every start and stop made through SGLang's
HTTP server, its TokenizerManager and ``sglang.Engine`` reaches the schedulers
as an rlprof command (``http``, ``tokenizer``, ``engine``). A ``ProfileReq``
without that marker comes from a path that bypasses them: gRPC mode's HTTP
sidecar (``--smg-grpc-mode``, 0.5.15+: its ``/start_profile`` builds a
``ProfileReq`` from a fixed set of SGLang's fields). Rather than SGLang's own
profiler (no step folder, the export on the scheduler thread), such a request
runs the session its fields mean through the route: ``requests.parse_start``
reads them, with this scheduler's weight version for ``step_source:
weight_version``. The sidecar sets ``with_stack`` and ``record_shapes`` true
unless told otherwise, and ``profile_by_stage``/``merge_profiles`` false:
those values say nothing, so the configuration decides; an explicit
``with_stack: false`` stays. An unconfigured scheduler leaves such requests to
SGLang, as before.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Callable

from rlprof_plugins._log import logger
from rlprof_plugins.session.protocol import combine, stop_wait_seconds, wait_until_written_sync, with_step_manifest

from . import weight_reader
from .start_requests import build_request, server_config

# SGLang's ProfileReq fields a caller sets, and the values that mean "not asked" where a caller always sets them.
FIELDS = ("output_dir", "start_step", "num_steps", "activities", "profile_prefix", "profile_id", "profile_stages")
UNSAID = {"with_stack": True, "record_shapes": True, "profile_by_stage": False, "merge_profiles": False}


def is_start(req: Any) -> bool:
    kind = getattr(req, "req_type", None) or getattr(req, "type", None)  # 0.5.15+ / older
    return getattr(kind, "name", str(kind)).endswith("START_PROFILE")


def command_of(req: Any) -> dict | None:
    """The rlprof command a native ``ProfileReq`` means on this scheduler; None: not configured (SGLang's own)."""
    config = server_config()
    if config is None:
        return None
    if not is_start(req):
        return {"op": "stop"}
    fields = {k: getattr(req, k) for k in FIELDS if getattr(req, k, None) is not None}
    fields.update({k: getattr(req, k) for k, unsaid in UNSAID.items() if getattr(req, k, None) not in (None, unsaid)})
    request = build_request(fields, config, weight_reader.scheduler_reader())
    for warning in request.warnings:  # this caller's answer is one line of text
        logger.warning("rlprof: %s", warning)
    return request.to_command()


def answer(manager: Any, req: Any, run_command: Callable[[Any, Any, dict], dict],
           gather: Callable[[Any, dict], list]) -> Any:
    """SGLang's ``ProfileReqOutput`` for a native request on a configured scheduler; None: SGLang's own.
    ``run_command``/``gather``: the scheduler patch's (one rank's reply; every rank's).
    A stop keeps SGLang's promise (the files are written when it answers), waiting at most
    ``stop_wait_seconds``, as vLLM's own-signature stop does (``patches/vllm/engine_profile.py``)."""
    from sglang.srt.managers.io_struct import ProfileReqOutput

    try:
        command = command_of(req)
    except Exception as e:  # a field the session cannot honour: the caller hears why, SGLang records nothing
        return ProfileReqOutput(success=False, message=f"rlprof: {e}")
    if command is None:
        return None
    module = sys.modules[type(manager).__module__]
    reply = run_command(manager, module, command)
    if command["op"] == "stop" and reply.get("ok"):
        reply = _written(manager, module, reply, run_command)
    replies = gather(manager, reply)
    try:
        result = combine(replies)
    except Exception as e:
        return ProfileReqOutput(success=False, message=f"rlprof: {e}")
    return ProfileReqOutput(success=True, message="rlprof: " + json.dumps(
        {k: result.get(k) for k in ("session_id", "global_step", "step_source", "state", "directory")}))


def _written(manager: Any, module: Any, reply: dict, run_command: Callable[[Any, Any, dict], dict]) -> dict:
    timeout = stop_wait_seconds(server_config().options, None)
    if not timeout:
        return reply

    def status(step: Any) -> dict:
        return with_step_manifest(combine([run_command(manager, module, {"op": "status", "global_step": step})]))

    wait_until_written_sync(with_step_manifest(combine([reply])), status, timeout)
    return run_command(manager, module, {"op": "status", "global_step": (reply.get("session") or {}).get(
        "global_step")})
