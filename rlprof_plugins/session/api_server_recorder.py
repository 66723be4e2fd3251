"""Recording the API-server ("frontend") process next to the workers.

vLLM records its front end with a CPU profiler for the whole session. Ours
writes into the same folder as the workers' traces, and when the session has
a window it stops by itself once the workers report the window closed (the
front end does not see engine iterations, so it asks ``poll``). Start, stop
and export run in one dedicated thread, never on the server's event loop:
Kineto binds a profiling session to the thread that started it, and a stop
from another thread finds no session and then crashes in ``save()`` (seen
with ``asyncio.to_thread``, whose pool hands out any of its threads).
"""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Awaitable, Callable

from ..backends import Backend
from .exporter import report
from .recording import Recording
from .recording_output import Exported
from .._log import logger


POLL_INTERVAL_S = 0.25


class FrontendRecorder:
    def __init__(self, *, backend_factory: Callable[[dict | None], Backend],
                 worker_name: Callable[[str | None], str]) -> None:
        self._backend_factory = backend_factory
        self._worker_name = worker_name
        self._recording: Recording | None = None
        self._directory: Path | None = None
        self._task: asyncio.Task | None = None
        # The last session's outcome, reported next to the workers' status.
        self.state = "idle"  # idle, recording, exporting, done, failed
        self.files: list[str] = []
        self.error: str | None = None
        self._manifest: dict | None = None  # session_id + header, for step sessions
        self._pending: asyncio.Future | None = None  # a background stop, kept referenced
        self.session_id: str | None = None  # the workers' session this recording belongs to
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlprof-frontend")

    async def _on_thread(self, fn, *args):
        """Run ``fn`` on the recorder's own thread (the profiler's thread)."""
        return await asyncio.get_running_loop().run_in_executor(self._thread, functools.partial(fn, *args))

    def _set(self, state: str, files: list[dict] | None = None, error: str | None = None) -> None:
        """Record a state change, and mirror it into the step's manifest (the
        manifest first: a status read must not see ``done`` before the step's
        completion work, e.g. the merge, has been announced there)."""
        try:
            if self._manifest is not None and self._directory is not None:
                section = {"role": "frontend", "state": state, "error": error, "files": files or []}
                report(self._directory, session_id=self._manifest["session_id"], writer="frontend",
                       section=section, header=self._manifest["header"])
        finally:
            self.state, self.error = state, error
            if files is not None and self._directory is not None:
                self.files = [str(self._directory / f["path"]) for f in files]

    def _exported(self, exported: Exported) -> None:
        if exported.error is None:
            self._set("done", exported.files)
        else:
            logger.warning("rlprof: frontend trace export failed: %s", exported.error)
            self._set("failed", exported.files, f"{type(exported.error).__name__}: {exported.error}")

    def summary(self) -> dict:
        return {"state": self.state, "files": list(self.files), "error": self.error}

    async def start(
        self,
        directory: Path,
        prefix: str | None,
        poll: Callable[[], Awaitable[bool]] | None,
        manifest_info: dict | None = None,
        session_id: str | None = None,
        overrides: dict | None = None,
    ) -> None:
        """``manifest_info`` (``session_id``, ``header``) for global-step sessions;
        ``overrides``: the request's own recorder settings."""
        if self._recording is not None:
            await self.stop()
        self.session_id = session_id
        self.files = []
        self._directory, self._manifest = directory, manifest_info
        try:
            recording = Recording.of_frontend(self._backend_factory(overrides), directory,
                                              step=manifest_info is not None, name=self._worker_name(prefix))
            await self._on_thread(recording.start)
        except Exception as e:
            logger.warning("rlprof: frontend profiler did not start: %s", e)
            await self._on_thread(self._set, "failed", None, f"{type(e).__name__}: {e}")
            return
        self._recording = recording
        await self._on_thread(self._set, "recording")
        if poll is not None:
            self._task = asyncio.create_task(self._stop_when_done(poll))

    async def _stop_when_done(self, poll: Callable[[], Awaitable[bool]]) -> None:
        try:
            while await poll():
                await asyncio.sleep(POLL_INTERVAL_S)
        except asyncio.CancelledError:
            return
        except Exception as e:
            logger.warning("rlprof: frontend could not poll the workers (%s); stopping its trace", e)
        await self.stop()

    def shutdown(self) -> None:
        """Synchronous stop for process shutdown (no event loop needed): a
        profiler left running at exit crashes torch's teardown."""
        recording, self._recording = self._recording, None
        if recording is None or self._directory is None:
            return

        def finish() -> None:
            try:
                recording.stop()
            except Exception as e:
                self._set("failed", None, f"{type(e).__name__}: {e}")
                return
            self._exported(recording.output.export())

        try:
            self._thread.submit(finish).result(timeout=120)
        except Exception as e:
            logger.warning("rlprof: frontend trace not written at shutdown: %s", e)

    def stop_soon(self) -> None:
        """Stop and export in the background; ``state`` says when it is done."""
        if self._recording is not None:
            self._pending = asyncio.ensure_future(self.stop())

    async def stop(self) -> list[str]:
        """Stop and export; returns the files written (none if not recording)."""
        recording, self._recording = self._recording, None
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        if recording is None or self._directory is None:
            return []
        self.state = "exporting"
        try:
            await self._on_thread(recording.stop)
        except Exception as e:
            logger.warning("rlprof: frontend profiler did not stop: %s", e)
            await self._on_thread(self._set, "failed", None, f"{type(e).__name__}: {e}")
            return []
        exported = await self._on_thread(recording.output.export)
        await self._on_thread(self._exported, exported)
        return list(self.files) if exported.error is None else []
