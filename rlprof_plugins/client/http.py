"""One JSON call to one server, with the standard library only.

The client runs inside RL trainers, whose environments we do not control, so
it adds no dependency (no ``requests``, no engine). A call never raises for
what a server or the network does: an HTTP error and an unreachable server
both come back as a ``Reply``, so one bad server cannot hide the others.
"""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

DEFAULT_TIMEOUT_S = 30.0
# Where the keys come from when the caller gives none: the servers' key, and
# a router's own key for its worker listing.
API_KEY_ENV = "RLPROF_API_KEY"
ROUTER_API_KEY_ENV = "RLPROF_ROUTER_API_KEY"
# Error bodies are reported, not kept whole: a proxy's HTML page can be long.
_MAX_TEXT = 500


@dataclass(frozen=True)
class Reply:
    """What one server answered: ``status`` 0 when it could not be reached."""

    status: int
    body: Any = None  # parsed JSON, or None
    error: str | None = None  # why the call did not get a JSON answer

    @property
    def reached(self) -> bool:
        return self.status != 0


def headers(api_key: str | None) -> dict[str, str]:
    found = {"Accept": "application/json", "Content-Type": "application/json"}
    if api_key:
        found["Authorization"] = f"Bearer {api_key}"
    return found


def call(base_url: str, method: str, path: str, *, body: dict | None = None, query: dict | None = None,
         api_key: str | None = None, timeout: float = DEFAULT_TIMEOUT_S) -> Reply:
    """``method base_url+path`` with a JSON body; never raises for the server's sake."""
    url = base_url.rstrip("/") + path + (f"?{urlencode(query)}" if query else "")
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers(api_key))
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return _parsed(response.status, response.read())
    except urllib.error.HTTPError as e:
        with e:
            return _parsed(e.code, e.read())
    except urllib.error.URLError as e:
        return Reply(0, error=f"unreachable: {_reason(e.reason)}")
    except (socket.timeout, TimeoutError):
        return Reply(0, error=f"no answer within {timeout:g} s")
    except (OSError, ValueError) as e:  # connection reset mid-answer, a malformed URL
        return Reply(0, error=f"unreachable: {e}")


def _parsed(status: int, raw: bytes) -> Reply:
    text = raw.decode("utf-8", errors="replace")
    try:
        return Reply(status, json.loads(text) if text.strip() else None)
    except ValueError:
        return Reply(status, None, error=f"answered HTTP {status} without JSON: {text[:_MAX_TEXT]!r}")


def _reason(reason: Any) -> str:
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return "timed out"
    return str(getattr(reason, "strerror", None) or reason)
