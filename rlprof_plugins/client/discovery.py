"""Which rollout servers to profile: given URLs, or the workers a router lists.

Routers that front RL rollout fleets list their workers over HTTP, in one of
two shapes (both read here, so any of them works):

- ``GET /workers`` -> ``{"workers": [{"url": ..., "worker_type": ...}, ...]}``:
  sglang-router 0.2+ (the SGLang Model Gateway, ``smg``) and vllm-router.
- ``GET /list_workers`` -> ``{"urls": [...]}``: older sglang-router releases,
  vllm-router, and slime's own router.

A data-parallel-aware router may list one worker per DP rank as
``http://host:port@<rank>``; those are one HTTP server, profiled once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable

from .answers import error_detail
from .http import DEFAULT_TIMEOUT_S, ROUTER_API_KEY_ENV, call

LISTINGS = ("/workers", "/list_workers")
_DP_RANK = re.compile(r"@\d+$")


class DiscoveryError(RuntimeError):
    """The router could not be asked, or listed nothing we can profile."""


@dataclass(frozen=True)
class Server:
    """One rollout server; ``role`` is the router's worker type (regular, prefill, decode)."""

    url: str
    role: str | None = None


def normalise(url: str) -> str:
    """``host:port`` or ``http://host:port/`` -> ``http://host:port`` (a DP-rank suffix dropped)."""
    url = url.strip()
    if not url:
        raise ValueError("empty server URL")
    if "://" not in url:
        url = "http://" + url
    return _DP_RANK.sub("", url.rstrip("/"))


def unique(servers: Iterable[Server]) -> list[Server]:
    seen: dict[str, Server] = {}
    for s in servers:
        seen.setdefault(s.url, s)
    return list(seen.values())


def from_listing(body: Any) -> list[Server] | None:
    """The servers in a router's answer, or None when it is not a worker listing."""
    if not isinstance(body, dict):
        return None
    if isinstance(body.get("workers"), list):
        found = []
        for w in body["workers"]:
            url = w.get("url") if isinstance(w, dict) else w
            if isinstance(url, str) and url.strip():
                found.append(Server(normalise(url), w.get("worker_type") if isinstance(w, dict) else None))
        return unique(found)
    if isinstance(body.get("urls"), list):
        return unique(Server(normalise(u)) for u in body["urls"] if isinstance(u, str) and u.strip())
    return None


def router_servers(router_url: str, *, api_key: str | None = None,
                   timeout: float = DEFAULT_TIMEOUT_S) -> list[Server]:
    """The workers behind ``router_url``; raises ``DiscoveryError`` saying what each listing answered."""
    router_url = normalise(router_url)
    tried = []
    for path in LISTINGS:
        reply = call(router_url, "GET", path, api_key=api_key, timeout=timeout)
        if not reply.reached:
            raise DiscoveryError(f"router {router_url}: {reply.error}")
        servers = from_listing(reply.body) if reply.status == 200 else None
        if servers:
            return servers
        if reply.status in (401, 403):  # the router guards its listing (e.g. sglang-router's control-plane keys)
            raise DiscoveryError(f"router {router_url}: {path}: HTTP {reply.status}: "
                                 f"{error_detail(reply) or 'no details'} (give the router's admin key: "
                                 f"router_api_key= or ${ROUTER_API_KEY_ENV})")
        tried.append(f"{path}: " + ("no workers" if servers == [] else reply.error or f"HTTP {reply.status}"))
    raise DiscoveryError(f"router {router_url} listed no workers ({'; '.join(tried)})")

