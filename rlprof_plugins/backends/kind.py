"""What a backend declares about itself (``BackendKind``), and what it is built from (``BuildContext``).

Each backend module holds one ``BackendKind``; ``registry.KINDS`` lists them.
Pure data: importable without torch or torch_npu.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

if TYPE_CHECKING:
    from . import Backend


def _as_given(key: str, value: Any, error: Callable) -> Any:
    return value


def _no_rule(data: Mapping[str, Any], error: Callable) -> None:
    return None


def _available_everywhere() -> str | None:
    return None


@dataclass(frozen=True)
class BuildContext:
    """What an engine patch knows when its worker builds a session's backend.

    ``torch_settings(operator_table, overrides)``: the engine's own profiler
    configuration as torch settings for one session (a request's overrides
    over it); ``options``: the server's ``ProfileOptions`` (each backend reads
    its own keys from ``options.backend_keys``); ``extra_metadata``: what the
    trace's header should carry (the engine's rank description).
    """

    torch_settings: Callable[[bool, dict], Any]
    options: Any
    extra_metadata: dict[str, str] | None = None


@dataclass(frozen=True)
class BackendKind:
    name: str  # the value of the ``backend`` key
    devices: tuple[str, ...]  # the devices ``auto`` picks it for, in order of preference
    build: Callable[[BuildContext, bool, dict], "Backend"]  # (context, operator_table, overrides)
    keys: Mapping[str, Any] = field(default_factory=dict)  # its own keys -> defaults
    check: Callable[[str, Any, Callable], Any] = _as_given  # one key's value, normalised; error(key, why)
    cross_check: Callable[[Mapping[str, Any], Callable], None] = _no_rule  # rules across the given keys
    unavailable: Callable[[], str | None] = _available_everywhere  # why it cannot record on this host, or None
    refuses: Mapping[str, str] = field(default_factory=dict)  # device -> why this backend must not record there
