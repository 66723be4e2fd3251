"""Errors the plugin raises to users, each carrying what an HTTP layer needs.

Every error names the configuration key or request field at fault, so a
caller can show it next to the input (HTTP 400 bodies, argparse messages).
"""

from __future__ import annotations


class OptionsError(ValueError):
    """Invalid profiler configuration; raised at start-up, names the key."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"profiler config key '{key}': {message}")
        self.key = key
        self.message = message


class RequestError(ValueError):
    """Invalid start/stop request; maps to HTTP 400, names the field."""

    status = 400

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

    kind = "invalid_request"

    def to_json(self) -> dict:
        return {"error": {"type": self.kind, "field": self.field, "message": self.message}}


class ConflictError(RuntimeError):
    """The request does not fit the session state (double start, stop with
    nothing recording); maps to HTTP 409."""

    status = 409

    def __init__(self, message: str, state: dict | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.state = state or {}

    def to_json(self) -> dict:
        return {"error": {"type": "conflict", "message": self.message, "session": self.state}}


class UnavailableError(RuntimeError):
    """A feature could not be installed in some engine process (a patch did
    not apply there); maps to HTTP 503 and names the feature."""

    status = 503

    def __init__(self, feature: str, message: str) -> None:
        super().__init__(f"{feature}: {message}")
        self.feature = feature
        self.message = message

    def to_json(self) -> dict:
        return {"error": {"type": "unavailable", "feature": self.feature, "message": self.message}}



class NotFoundError(RequestError):
    """A request naming a file the session did not write (or one not readable
    from this server); maps to HTTP 404 and names the field."""

    status = 404
    kind = "not_found"
