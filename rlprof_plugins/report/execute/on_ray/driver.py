"""Join the Ray cluster from this process as a driver (``open_session``), and leave it.

Ray is imported only here, joined with its workers' output off (``log_to_driver=False``), and what joining
changes in this process (the fault handler, the exception hook) is given back on leaving. An address that
takes no connection is said at once (``check_reachable``); ``ray.init`` on one that never answers is left
after ``timeout`` seconds.
"""

from __future__ import annotations

import faulthandler
import importlib.util
import logging
import os
import socket
import sys
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from .cluster import ClusterSession

NEEDS_RAY = "--ray needs Ray: pip install 'rlprof-plugins[ray]'"
DEFAULT_TIMEOUT = 600.0
PROBE_SECONDS = 10.0  # a cluster address that does not take a connection in this long has no cluster

__all__ = ["DEFAULT_TIMEOUT", "NoCluster", "RayMissing", "ClusterSession", "open_session"]


class RayMissing(RuntimeError):
    """Ray is not installed where the command runs (said as ``NEEDS_RAY``)."""


class NoCluster(RuntimeError):
    """No Ray cluster could be joined at the address."""


def check_reachable(address: str, seconds: float) -> None:
    """A ``host:port`` that takes no TCP connection has no cluster: said now (``ray.init`` would wait on
    it for good)."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or "://" in address:
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=seconds).close()
    except OSError as e:
        raise NoCluster(f"--ray {address}: no Ray cluster to join (nothing answers there: {e.strerror or e})") from None


def _join(ray: Any, address: str, timeout: float) -> None:
    """``ray.init`` at ``address`` within ``timeout`` seconds, or ``NoCluster`` saying why not."""
    outcome: list[BaseException | None] = []

    def init() -> None:
        try:
            ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
            outcome.append(None)
        except BaseException as e:  # said on the command's thread
            outcome.append(e)

    joining = threading.Thread(target=init, daemon=True, name="rlprof-ray-join")
    joining.start()
    joining.join(timeout)
    if not outcome:
        raise NoCluster(f"--ray {address}: the cluster did not answer within --timeout {timeout:g} s")
    if (error := outcome[0]) is not None:
        first = str(error).splitlines()[0][:200] if str(error) else ""
        raise NoCluster(f"--ray {address}: no Ray cluster to join ({type(error).__name__}: {first})") from None


@contextmanager
def open_session(root_text: str, address: str = "auto", *, timeout: float = DEFAULT_TIMEOUT, use_cache: bool = True,
                 progress: Callable[[str], None] | None = None) -> Iterator[ClusterSession]:
    """Join the Ray cluster at ``address`` (``auto``: the one this machine belongs to, as ``ray.init`` finds
    it), find its alive nodes, and leave the cluster when done."""
    if importlib.util.find_spec("ray") is None:
        raise RayMissing(NEEDS_RAY)
    check_reachable(os.environ.get("RAY_ADDRESS", "") if address == "auto" else address,
                    min(timeout, PROBE_SECONDS))
    hook, handler_was_on = sys.excepthook, faulthandler.is_enabled()
    try:
        try:
            import ray
        except ImportError:
            raise RayMissing(NEEDS_RAY) from None
        if not handler_was_on and hasattr(sys.__stderr__, "fileno"):
            faulthandler.enable(file=sys.__stderr__)  # Ray would enable it on sys.stderr, which may be no file
        _join(ray, address, timeout)
        try:
            session = ClusterSession(ray, root_text, timeout=timeout, use_cache=use_cache,
                                     say=progress or (lambda _text: None))
            yield session
        finally:
            ray.shutdown()
    finally:
        sys.excepthook = hook
        if not handler_was_on:
            faulthandler.disable()
