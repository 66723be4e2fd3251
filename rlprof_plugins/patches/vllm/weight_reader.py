"""Helper: vLLM's weight version read as the global step (``step_source: weight_version``).

vLLM keeps the version of the weights it serves in its EngineCore
(vllm#49040; among tested releases from 0.32, while 0.24 has none): ``"default"`` until ``POST /finish_weight_update {"weight_version": ...}``
or ``POST /update_weight_version {"new_version": ...}`` (routes of the API
server in ``VLLM_SERVER_DEV_MODE``), or ``LLM``/``AsyncLLM``'s
``update_weight_version``. rlprof reads it where a start request is parsed
(the API server's route, ``AsyncLLM.start_profile``, ``LLM.start_profile``)
through the engine's own ``get_weight_version``, once per start that names
no ``global_step``. Releases without it refuse the option at start-up,
naming the key and the release.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from packaging.version import Version

from rlprof_plugins.config.options import ProfileOptions
from rlprof_plugins.errors import OptionsError
from rlprof_plugins.step_sources.which_step import WEIGHT_VERSION

from .facts import WEIGHT_VERSION_FIRST, version

Reader = Callable[[], Any]


def check_release(options: ProfileOptions, installed: str | None = None) -> None:
    """At start-up: ``step_source: weight_version`` needs a release that keeps one."""
    if options.step_source != WEIGHT_VERSION:
        return
    installed = installed or version()
    if installed is None or Version(installed) < Version(WEIGHT_VERSION_FIRST):
        raise OptionsError("step_source", f"weight_version needs an engine that keeps a weight version; vLLM "
                                          f"{installed} keeps none (vLLM does from {WEIGHT_VERSION_FIRST}): send "
                                          "\"global_step\" in each start request instead (docs/trainer.md)")


def wanted(options: ProfileOptions, fields: Any) -> bool:
    """Whether a start needs the version: the option is on and the request names no step."""
    return (options.step_source == WEIGHT_VERSION and isinstance(fields, Mapping)
            and fields.get("global_step") is None)


async def read_async(engine_client: Any) -> Reader | None:
    """The version ``AsyncLLM`` (the API server's engine client) holds now."""
    getter = getattr(engine_client, "get_weight_version", None)
    if getter is None:
        return None
    held = await getter()
    return lambda: held


def read_sync(llm_engine: Any) -> Reader | None:
    """The version an in-process ``LLMEngine`` holds now."""
    getter = getattr(llm_engine, "get_weight_version", None)
    if getter is None:
        return None
    held = getter()
    return lambda: held
