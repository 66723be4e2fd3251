"""Helper: SGLang's weight version read as the global step (``step_source: weight_version``).

Every supported SGLang release keeps the version of the weights it serves
(``--weight-version``, ``"default"`` unless given), set again after each
successful ``update_weights_from_distributed``/``_from_tensor``/``_from_disk``
whose request carries ``weight_version`` and by ``POST
/update_weight_version`` (releases that have them). The TokenizerManager
holds it: in ``server_args.weight_version`` up to 0.5.15, behind
``config_value("weight_version")`` in the config-context era (0.5.23), which
is read first where the release has it. rlprof reads it in the process that
parses a start request (the HTTP route and the in-process
``TokenizerManager``/``Engine`` calls both reach ``http.start``), and in a
scheduler for a request that reached it without that route (gRPC mode's
sidecar: ``native_requests``), where the scheduler's own copy lives:
``runtime_context.get_serving().weight_version`` (0.5.23), else the server
arguments the release publishes to its schedulers.
"""

from __future__ import annotations

from typing import Any, Callable


def reader(tokenizer_manager: Any) -> Callable[[], Any] | None:
    """Reads the version ``tokenizer_manager`` holds at the moment it is called; None: it keeps none."""
    if tokenizer_manager is None:
        return None
    config_value = getattr(type(tokenizer_manager), "config_value", None)
    if callable(config_value):
        return lambda: tokenizer_manager.config_value("weight_version")
    server_args = getattr(tokenizer_manager, "server_args", None)
    if server_args is None or not hasattr(server_args, "weight_version"):
        return None
    return lambda: server_args.weight_version


def scheduler_reader() -> Callable[[], Any] | None:
    """Reads the version this scheduler process holds; None: the release keeps none here."""
    import importlib

    try:
        serving = importlib.import_module("sglang.srt.runtime_context").get_serving
        serving()
        return lambda: serving().weight_version
    except Exception:
        pass
    try:
        args = importlib.import_module("sglang.srt.server_args").get_global_server_args
        if hasattr(args(), "weight_version"):
            return lambda: args().weight_version
    except Exception:
        pass
    return None
