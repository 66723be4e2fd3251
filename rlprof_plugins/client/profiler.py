"""Profile one RL global step on every rollout server, from the trainer.

The trainer owns the global step; the rollout runs on many servers, often
behind a router. ``RolloutProfiler`` sends each action to every server at
once (a thread per server), collects one ``ServerResult`` per server and
never lets one server's failure hide another's. ``step()`` wraps a rollout:
it starts the servers' sessions for that global step, stops them when the
rollout is over (a window that closed by itself answers ``already_finished``),
and waits until every server has written its files -- and does nothing at
all for the steps that are not configured.

Profiling must not end a training run: by default failures are logged as one
warning naming every failed server (``on_error="raise"`` raises
``FleetError`` instead), and a stop always follows a start, also when the
rollout raised.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from ..errors import RequestError
from ..config.options import check_count, check_flag
from ..metrics.flight import FLIGHT_DUMP_PATH
from .answers import dump_answer, mark_answer, session_answer, settled, stop_answer
from .discovery import DiscoveryError, Server, normalise, router_servers, unique
from .http import API_KEY_ENV, DEFAULT_TIMEOUT_S, ROUTER_API_KEY_ENV, Reply, call
from .results import FleetError, FleetResult, ServerResult

logger = logging.getLogger("rlprof.client")

BUSY_STATES = ("waiting", "recording", "exporting")
MAX_THREADS = 32
# A server that cannot be reached this many polls in a row stops being waited for.
UNREACHABLE_POLLS = 3


@dataclass
class StepRun:
    """What ``step()`` did for one global step (``profiled`` False: nothing)."""

    global_step: int
    profiled: bool
    start: FleetResult | None = None
    stop: FleetResult | None = None
    wait: FleetResult | None = None

    @property
    def ok(self) -> bool:
        return all(r.ok for r in (self.start, self.stop, self.wait) if r is not None)

    def directories(self) -> dict[str, str]:
        """Each server's step folder (on that server's machine)."""
        return {r.url: r.directory for r in (self.start.results if self.start else []) if r.directory}


def check_step(name: str, value: Any, *, allow_none: bool = False) -> int | None:
    """An integer >= 0, checked as the servers check it, raising a ``ValueError`` naming ``name``."""
    return check_count(name, value, allow_none=allow_none, error=RequestError)


class RolloutProfiler:
    """Start, stop and wait for profiles on every rollout server.

    ``urls``: the servers (``http://host:port``, or ``host:port``); ``router``:
    a router whose workers are profiled (read again at each action, so workers
    added later are included); both may be given. ``api_key``: the servers'
    key, sent as ``Authorization: Bearer`` (default: ``$RLPROF_API_KEY``);
    ``router_api_key``: the key for the router's worker listing (default:
    ``$RLPROF_ROUTER_API_KEY``, else ``api_key``).
    ``steps``: the global steps ``step()`` profiles (None: every step).
    ``step_start``/``step_end``/``by_stage``: the window sent with each start
    (None: the servers' configured defaults).
    """

    def __init__(self, urls: Iterable[str] | str | None = None, *, router: str | None = None,
                 api_key: str | None = None, router_api_key: str | None = None,
                 steps: Iterable[int] | None = None,
                 step_start: int | None = None, step_end: int | None = None, by_stage: bool | None = None,
                 wait: bool = True, wait_timeout: float = 600.0, request_timeout: float = DEFAULT_TIMEOUT_S,
                 poll_interval: float = 0.5, on_error: str = "warn") -> None:
        if isinstance(urls, str):
            urls = [u for u in urls.split(",") if u.strip()]
        self.urls = [normalise(u) for u in urls or []]
        self.router = normalise(router) if router else None
        if not self.urls and not self.router:
            raise ValueError("urls/router: give the servers' URLs, a router's URL, or both")
        self.api_key = api_key if api_key is not None else os.environ.get(API_KEY_ENV) or None
        self.router_api_key = (router_api_key if router_api_key is not None
                               else os.environ.get(ROUTER_API_KEY_ENV) or self.api_key)
        self.steps = None if steps is None else frozenset(check_step("steps", s) for s in steps)
        self.step_start = check_step("step_start", step_start, allow_none=True)
        self.step_end = check_step("step_end", step_end, allow_none=True)
        self.by_stage = None if by_stage is None else check_flag("by_stage", by_stage, error=RequestError)
        if on_error not in ("warn", "raise"):
            raise ValueError(f"on_error: must be 'warn' or 'raise', got {on_error!r}")
        self.on_error = on_error
        self.wait_after_step = wait
        self.wait_timeout = wait_timeout
        self.request_timeout = request_timeout
        self.poll_interval = poll_interval

    # ---- which servers ------------------------------------------------------
    def servers(self) -> list[Server]:
        """The servers an action goes to now; raises ``DiscoveryError`` if the router cannot list them."""
        found = [Server(u) for u in self.urls]
        if self.router:
            found += router_servers(self.router, api_key=self.router_api_key, timeout=self.request_timeout)
        return unique(found)

    def profiles(self, global_step: int) -> bool:
        """Whether ``step(global_step)`` records anything."""
        return self.steps is None or global_step in self.steps

    # ---- actions ----------------------------------------------------------------
    def start(self, global_step: int, *, step_start: int | None = None, step_end: int | None = None,
              by_stage: bool | None = None, servers: Iterable[Server | str] | None = None) -> FleetResult:
        """Start a session for ``global_step`` on every server, all at once."""
        body: dict[str, Any] = {"global_step": check_step("global_step", global_step)}
        for key, value, default in (("step_start", step_start, self.step_start),
                                    ("step_end", step_end, self.step_end)):
            chosen = check_step(key, value if value is not None else default, allow_none=True)
            if chosen is not None:
                body[key] = chosen
        chosen_stage = by_stage if by_stage is not None else self.by_stage
        if chosen_stage is not None:
            body["by_stage"] = bool(chosen_stage)
        return self._act("start", global_step, servers,
                         lambda s: self._call(s, "POST", "/start_profile", body=body), session_answer)

    def stop(self, *, servers: Iterable[Server | str] | None = None) -> FleetResult:
        """Stop the running session on every server (their files are written in the background).

        Each server is asked not to hold the answer until its files are
        written (``wait: false``): ``wait()`` polls every server at once instead."""
        return self._act("stop", None, servers,
                         lambda s: self._call(s, "POST", "/stop_profile", body={"wait": False}), stop_answer)

    def status(self, global_step: int | None = None, *,
               servers: Iterable[Server | str] | None = None) -> FleetResult:
        """Each server's session for ``global_step`` (None: its current or last session)."""
        query = None if global_step is None else {"global_step": check_step("global_step", global_step)}
        return self._act("status", global_step, servers,
                         lambda s: self._call(s, "GET", "/profile_status", query=query), session_answer)

    def wait(self, global_step: int | None = None, *, timeout: float | None = None,
             servers: Iterable[Server | str] | None = None) -> FleetResult:
        """Poll ``/profile_status`` until every server's session is ``done`` or ``failed``.

        A server is ok when its session is done; a failed session, no such session
        (``idle``), still busy at ``timeout`` (default ``wait_timeout``) or
        unreachable for several polls in a row are failures, each said.
        """
        timeout = self.wait_timeout if timeout is None else timeout
        try:
            targets = self._targets(servers)
        except DiscoveryError as e:
            return FleetResult("wait", [], global_step, error=str(e))
        deadline = time.monotonic() + timeout
        pending = {s.url: s for s in targets}
        last: dict[str, ServerResult] = {}
        misses: dict[str, int] = {}
        while pending:
            polled = self.status(global_step, servers=list(pending.values()))
            for result in polled.results:
                last[result.url] = result
                if result.http_status == 0:
                    misses[result.url] = misses.get(result.url, 0) + 1
                    if misses[result.url] < UNREACHABLE_POLLS:
                        continue
                elif result.ok and result.state in BUSY_STATES:
                    misses.pop(result.url, None)
                    continue
                pending.pop(result.url)
            remaining = deadline - time.monotonic()
            if not pending or remaining <= 0:
                break
            time.sleep(min(self.poll_interval, remaining))
        return FleetResult("wait", [settled(last[s.url], global_step, timeout, s.url in pending)
                                    for s in targets], global_step)

    @contextmanager
    def step(self, global_step: int, *, step_start: int | None = None, step_end: int | None = None,
             by_stage: bool | None = None) -> Iterator[StepRun]:
        """Profile the rollout inside the block on every server, for the configured steps only.

        ``with profiler.step(global_step) as run: rollout()``; ``run`` says
        what happened on each server (``run.profiled`` is False for the steps
        not configured, where nothing is sent).
        """
        run = StepRun(check_step("global_step", global_step), self.profiles(global_step))
        if not run.profiled:
            yield run
            return
        try:
            servers = self.servers()
        except DiscoveryError as e:
            run.start = FleetResult("start", [], global_step, error=str(e))
            self._report(run.start, raising=True)
            yield run
            return
        run.start = self.start(global_step, step_start=step_start, step_end=step_end, by_stage=by_stage,
                               servers=servers)
        started = [s for s, r in zip(servers, run.start.results) if r.ok]
        if not run.start.ok and self.on_error == "raise":
            if started:  # no server is left recording a step the trainer gave up on
                self._report(self.stop(servers=started), raising=False)
            raise FleetError(run.start)
        self._report(run.start, raising=False)
        body_failed = False
        try:
            yield run
        except BaseException:
            body_failed = True
            raise
        finally:
            if started:
                self._finish(run, started, raising=not body_failed)

    def _finish(self, run: StepRun, started: list[Server], *, raising: bool) -> None:
        """Stop the servers a step started and (if configured) wait for their files; then report."""
        run.stop = self.stop(servers=started)
        run.stop.global_step = run.global_step  # the session it ended, for the report
        stopped = [s for s, r in zip(started, run.stop.results) if r.ok]
        if self.wait_after_step and stopped:
            run.wait = self.wait(run.global_step, servers=stopped)
        for part in (run.stop, run.wait):
            if part is not None:
                self._report(part, raising=raising)

    # ---- plumbing ---------------------------------------------------------------
    def mark_step(self, global_step: int, *, servers: Iterable[Server | str] | None = None) -> FleetResult:
        """The RL step every rank's step metrics count from now on, on every server (for trainers
        whose servers hold no weight version and that start no profile: one light call a step)."""
        body = {"global_step": check_step("global_step", global_step)}
        return self._act("mark", global_step, servers,
                         lambda s: self._call(s, "POST", "/profile_step", body=body), mark_answer)

    def flight_dump(self, *, servers: Iterable[Server | str] | None = None) -> FleetResult:
        """Every server's flight recorder writes its ring now (``POST /rlprof/flight_dump``), each rank below
        its current step's ``flight/``; the folder's name is in each result's ``directory``."""
        return self._act("dump", None, servers, lambda s: self._call(s, "POST", FLIGHT_DUMP_PATH), dump_answer)

    def _targets(self, servers: Iterable[Server | str] | None) -> list[Server]:
        if servers is None:
            return self.servers()
        return unique(s if isinstance(s, Server) else Server(normalise(s)) for s in servers)

    def _call(self, server: Server, method: str, path: str, **kwargs: Any) -> Reply:
        return call(server.url, method, path, api_key=self.api_key, timeout=self.request_timeout, **kwargs)

    def _act(self, action: str, global_step: int | None, servers: Iterable[Server | str] | None,
             send: Callable[[Server], Reply], read: Callable[[str, Reply], ServerResult]) -> FleetResult:
        try:
            targets = self._targets(servers)
        except DiscoveryError as e:
            return FleetResult(action, [], global_step, error=str(e))
        if not targets:
            return FleetResult(action, [], global_step)
        with ThreadPoolExecutor(max_workers=min(MAX_THREADS, len(targets)),
                                thread_name_prefix=f"rlprof-{action}") as pool:
            replies = list(pool.map(send, targets))
        results = []
        for server, reply in zip(targets, replies):
            result = read(path_of(action), reply)
            result.url, result.role = server.url, server.role
            results.append(result)
        return FleetResult(action, results, global_step)

    def _report(self, result: FleetResult, *, raising: bool) -> None:
        if result.ok:
            return
        if self.on_error == "raise" and raising:
            raise FleetError(result)
        logger.warning("rlprof: %s", FleetError(result))


def path_of(action: str) -> str:
    paths = {"start": "/start_profile", "stop": "/stop_profile", "mark": "/profile_step", "dump": FLIGHT_DUMP_PATH}
    return paths.get(action, "/profile_status")
