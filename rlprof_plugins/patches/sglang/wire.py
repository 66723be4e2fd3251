"""Helper: rlprof's commands on SGLang's wire, from the TokenizerManager to every scheduler.

Not a patch module. A command travels as SGLang's own ``ProfileReq`` whose
``profile_id`` holds ``rlprof:<json>`` (the one free-form field every release
carries, so no new message type crosses SGLang's typed IPC) and whose
activities hold a marker no native profiler starts for. ``send`` is the
sending side (the ``http``, ``tokenizer`` and ``engine`` patch modules, through
``sessions``); ``decode_command`` the receiving side (the ``scheduler`` patch module).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any


CHANNEL = "rlprof:"


def encode_command(command: dict) -> str:
    return CHANNEL + json.dumps(command)


def decode_command(profile_id: Any) -> dict | None:
    if isinstance(profile_id, str) and profile_id.startswith(CHANNEL):
        return json.loads(profile_id[len(CHANNEL):])
    return None


# Marks a ProfileReq that only rlprof's scheduler patch acts on: a scheduler
# without it starts no profiler for an activity it does not know.
MARKER_ACTIVITY = "RLPROF"


def profile_req(command: dict) -> Any:
    """SGLang's ``ProfileReq`` carrying an rlprof command. Its kind field is
    ``req_type`` in the msgspec-struct era (0.5.15+), ``type`` before."""
    from sglang.srt.managers.io_struct import ProfileReq, ProfileReqType

    names = getattr(ProfileReq, "__struct_fields__", None) or [f.name for f in dataclasses.fields(ProfileReq)]
    kind = ProfileReqType.STOP_PROFILE if command["op"] == "stop" else ProfileReqType.START_PROFILE
    return ProfileReq(**{"req_type" if "req_type" in names else "type": kind},
                      profile_id=encode_command(command), activities=[MARKER_ACTIVITY])


async def send(tokenizer_manager: Any, command: dict) -> list:
    """One command to every scheduler; one reply per rank."""
    tokenizer_manager.auto_create_handle_loop()
    req = profile_req(command)
    replies: list = []
    for result in await tokenizer_manager.profile_communicator(req):
        try:
            answer = json.loads(result.message)
        except (TypeError, ValueError):
            answer = None
        if not isinstance(answer, list):
            reason = "a scheduler answered without rlprof (its patch is not applied there; see the scheduler log)"
            replies.append({"ok": False, "unavailable": reason})
        else:
            replies.extend(answer)
    return replies
