"""Helper: what an SGLang server contributes to a start request, and the request built from a body.

Shared by the HTTP routes and in-process calls (``http``, ``tokenizer``,
``engine``) and by the schedulers, for a profile request that reached them
without rlprof's route (``native_requests``): the server's rlprof
configuration (``RLPROF_PROFILER_CONFIG``, validated at launch), where its
files go, its device, and one ``StartRequest`` parsed from SGLang's fields.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Optional

from rlprof_plugins.backends import which_backend
from rlprof_plugins.config.launch_config import ProfilerConfig, from_environment
from rlprof_plugins.config.options import ProfileOptions
from rlprof_plugins.config.requests import Server, StartRequest, parse_start
from rlprof_plugins.errors import OptionsError, UnavailableError


def server_config() -> Optional[ProfilerConfig]:
    try:
        return from_environment()
    except OptionsError as e:  # validated at launch; set by hand later it is reported per request
        raise UnavailableError("rlprof configuration", str(e)) from None


def request_server(config: Optional[ProfilerConfig], output_dir: Any = None) -> Server:
    """What this SGLang server contributes to a start request's meaning.
    Without rlprof configuration files go where SGLang would put them:
    the request's ``output_dir``, else ``SGLANG_TORCH_PROFILER_DIR`` or /tmp."""
    root = config.server_root() if config else None
    if root is None and not isinstance(output_dir, str):
        root = os.path.abspath(os.getenv("SGLANG_TORCH_PROFILER_DIR", "/tmp"))
    return Server(engine="sglang", defaults=config.options if config else ProfileOptions(), output_root=root,
                  device=which_backend.device_type())  # prefix: requests' plain file-name rule


def build_request(body: Any, config: Optional[ProfilerConfig], version: Any = None) -> StartRequest:
    """An SGLang start body (any request field) as one rlprof request; ``version`` reads the engine's
    weight version where the step may come from it (``weight_version.reader``)."""
    server = dataclasses.replace(request_server(config, body.get("output_dir") if isinstance(body, dict) else None),
                                 weight_version=version)
    request = parse_start(body, server)
    if request.output_dir is None:  # the configured (or SGLang's default) directory
        request = dataclasses.replace(request, output_dir=server.output_root)
    return request
