"""What each server answered to one fleet action, and all of it together.

A fleet action (start, stop, status, wait) has one ``ServerResult`` per
server; ``FleetResult`` holds them all, so a caller sees every failure at
once (``errors()``, ``raise_for_errors()``, the CLI's table) instead of the
first one hiding the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ServerResult:
    url: str
    ok: bool
    http_status: int = 0  # 0: not reached
    state: str | None = None  # the session's state on that server (waiting, recording, exporting, done, ...)
    global_step: int | None = None
    directory: str | None = None
    files: list[str] = field(default_factory=list)
    error: str | None = None
    role: str | None = None  # the router's worker type, when discovered through one
    body: Any = None  # the server's whole JSON answer

    def to_json(self) -> dict[str, Any]:
        return {"url": self.url, "ok": self.ok, "http_status": self.http_status, "state": self.state,
                "global_step": self.global_step, "directory": self.directory, "files": self.files,
                "error": self.error, "role": self.role}


@dataclass
class FleetResult:
    action: str  # start, stop, status, wait
    results: list[ServerResult]
    global_step: int | None = None
    error: str | None = None  # the action as a whole failed (the router could not be asked)

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.results) and all(r.ok for r in self.results)

    @property
    def failed(self) -> list[ServerResult]:
        return [r for r in self.results if not r.ok]

    @property
    def succeeded(self) -> list[ServerResult]:
        return [r for r in self.results if r.ok]

    def errors(self) -> list[str]:
        """One line per failure: the router's, then each failed server's."""
        lines = [self.error] if self.error else []
        if not self.results and not self.error:
            lines.append("no servers to act on")
        return lines + [f"{r.url}: {r.error}" for r in self.failed]

    def raise_for_errors(self) -> "FleetResult":
        if not self.ok:
            raise FleetError(self)
        return self

    def to_json(self) -> dict[str, Any]:
        return {"action": self.action, "global_step": self.global_step, "ok": self.ok, "error": self.error,
                "servers": [r.to_json() for r in self.results]}


class FleetError(RuntimeError):
    """Some servers failed an action; ``result`` has every server's outcome."""

    def __init__(self, result: FleetResult) -> None:
        failed = result.errors()
        step = "" if result.global_step is None else f" (global step {result.global_step})"
        super().__init__(f"{result.action}{step} failed on {len(result.failed) or 'all'} of "
                         f"{len(result.results)} server(s):\n  " + "\n  ".join(failed))
        self.result = result
