"""The uploader: copies a spool folder (``store.destination``) to its object store URI, off the engine.

One uploader runs per spool folder and node, as a process of its own (started, never forked, by the
first engine process that writes there: ``ensure_running``), so no upload ever holds an engine's GIL,
and scheduled only on CPU time the engine's processes leave idle (``yield_the_cpu``).
It holds ``.rlprof-uploader.lock`` while it runs; a second one started meanwhile sees the lock and ends.

Each pass walks the spool folder and uploads every finished file that changed since its last upload
(files are published by rename, so any visible file is whole; hidden files are temporaries and locks).
What was uploaded, and as which version (size, modification time), is kept in ``.rlprof-uploads.json``,
so an uploader started after a restart resumes where the last one stopped. In each step folder the
manifest goes last, carrying the folder's upload state (``upload``: ``uploading``, ``done`` or
``failed`` with the reason and the command that finishes the job), so a manifest in the store that says
``done`` means every file beside it is there.

A failed upload keeps the spooled copy and is tried again with back-off. Past the spool's bound
(``RLPROF_SPOOL_MAX_MB``) the uploader removes copies already in the store, oldest first, and says so
in its log; recorded data that is not in the store yet is never removed.

Two servers on different nodes writing one prefix keep each other's files as on a shared filesystem:
the first claims the prefix (``.rlprof-root.json`` in the store, renewed while its uploader runs), any
other uploads below ``servers/<name>/``.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import logging
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..atomic_files import write_text_atomic
from . import manifest
from .destination import MARKER, Destination, destination_at

LOCK = ".rlprof-uploader.lock"
LEDGER = ".rlprof-uploads.json"
PLACE = ".rlprof-upload-place"  # "servers/<name>" where another server held the prefix (absent: the prefix)
LOG = ".rlprof-uploader.log"
STATE = ".rlprof-upload-state.json"  # the uploader's counters, read by /metrics (``metrics.series``)
REMOTE_CLAIM = ".rlprof-root.json"
LOCAL_CLAIM = ".rlprof-root.json"
REMOTE_LEASE_S = 300.0  # a prefix's claim not renewed for this long has ended
POLL_S = 1.0  # how often a pass looks for new files
PARALLEL = 4  # files sent at once (each a request of its own to the store)
RATE_ENV = "RLPROF_UPLOAD_MBPS"  # the uploads' average rate, megabytes a second (0: no limit)
# Uploading at full speed shares the node's memory bandwidth and caches with the engine, whatever its CPU
# priority; at this rate the engine's generation kept its pace (docs/performance.md, "Object store uploads")
DEFAULT_MBPS = 20.0
BACKOFF_S = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)  # waits after consecutive failed passes
LINGER_S = 600.0  # after the engine is gone, how long failing uploads are retried before the uploader ends
UPLOADING, DONE, FAILED = "uploading", "done", "failed"
STORE = "(the store)"  # a failure of the store as a whole (the prefix's claim), not of one file
log = logging.getLogger("rlprof.upload")


def finish_command(spool: Path) -> str:
    """The command that finishes a spool folder's uploads by hand."""
    return f"rlprof upload {spool}"


@dataclass
class PassResult:
    """What one pass did: files uploaded, files whose upload failed (and why), bytes removed from the spool."""
    uploaded: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    evicted_bytes: int = 0
    pending: int = 0

    @property
    def ok(self) -> bool:
        return not self.failed


@dataclass
class UploadTotals:
    """What ``/metrics`` says of a spool folder's uploads: counters since the uploader started, and now."""
    uploaded_files: int = 0
    uploaded_bytes: int = 0
    removed_bytes: int = 0  # local copies removed (already in the store) to keep the spool's bound
    over_bound_bytes: int = 0  # data not yet in the store past the bound: kept, said here
    pending_files: int = 0
    failing: int = 0
    error: str | None = None


def read_totals(spool: Path) -> UploadTotals | None:
    try:
        data = json.loads((spool / STATE).read_text())
        return UploadTotals(**{k: v for k, v in data.items() if k in UploadTotals.__dataclass_fields__})
    except (OSError, ValueError, TypeError):
        return None


def _version(path: Path) -> dict[str, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


class Uploader:
    """Uploads one spool folder to its URI (``store`` is an ``object_store.Store`` or the like)."""

    def __init__(self, destination: Destination, store=None, server: str | None = None) -> None:
        from .object_store import Store

        self.destination = destination
        self.spool = destination.spool
        self.store = store if store is not None else Store(destination.uri)
        self.server = server or self._local_server()
        # where this spool folder lands below the URI ("" or servers/<name>): decided once, kept across restarts
        self.below = self._read_place()
        self._claimed_at = 0.0
        self.ledger: dict[str, dict] = self._read_ledger()
        self.totals = UploadTotals()
        self._lock = threading.Lock()
        self._next_start = 0.0  # when the next file may start (``_pace``)

    # ---- the ledger of what was uploaded -------------------------------------------------------------
    def _read_ledger(self) -> dict[str, dict]:
        try:
            data = json.loads((self.spool / LEDGER).read_text())
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def _save_ledger(self) -> None:
        write_text_atomic(self.spool / LEDGER, json.dumps(self.ledger, sort_keys=True) + "\n")

    def _read_place(self) -> str:
        try:
            return (self.spool / PLACE).read_text().strip()
        except OSError:
            return ""

    def _local_server(self) -> str | None:
        try:
            return json.loads((self.spool / LOCAL_CLAIM).read_text()).get("server")
        except (OSError, ValueError, AttributeError):
            return None

    # ---- the prefix's claim in the store -------------------------------------------------------------
    def claim_prefix(self) -> None:
        """Hold the prefix for this spool folder's server, or upload below ``servers/<name>/`` when another
        live server holds it; renewed every quarter lease."""
        now = time.time()
        if now - self._claimed_at < REMOTE_LEASE_S / 4:
            return
        name = self.server or self._local_server()
        if not name:
            self._claimed_at = now
            return
        self.server = name
        raw = self.store.read_bytes(REMOTE_CLAIM)
        held = None
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            held = json.loads(raw) if raw else None
        other = (isinstance(held, dict) and held.get("server") not in (None, name)
                 and now - float(held.get("renewed_at") or 0) < REMOTE_LEASE_S)
        if other and self.below == "":
            self.below = f"servers/{name}"
            write_text_atomic(self.spool / PLACE, self.below + "\n")
            log.warning("rlprof: %s is held by server %r; server %r uploads below %s/%s", self.store.uri,
                        held.get("server"), name, self.store.uri, self.below)
        if self.below == "":
            self.store.put_bytes(REMOTE_CLAIM, json.dumps({"server": name, "renewed_at": now}).encode())
        self._claimed_at = now

    def remote(self, relative: str) -> str:
        return f"{self.below}/{relative}" if self.below else relative

    # ---- one pass --------------------------------------------------------------------------------------
    def run_pass(self) -> PassResult:
        """Upload what changed; then bring each step folder's upload state up to date; then keep the bound."""
        result = PassResult()
        try:
            self.claim_prefix()
        except Exception as e:  # the store is down: every file waits for the next pass
            result.failed[STORE] = _reason(e)
        folders: dict[Path, list[Path]] = {}
        waiting = []
        found = self.files()
        for path in found:
            folder = self._step_folder(path)
            if folder is not None and path.name == manifest.MANIFEST:
                folders.setdefault(folder, [])
                continue
            if folder is not None:
                folders.setdefault(folder, []).append(path)
            if self._changed(path):
                waiting.append(path)
        if not result.ok:
            result.pending += len(waiting)
        else:
            with ThreadPoolExecutor(PARALLEL, thread_name_prefix="rlprof-upload") as pool:
                list(pool.map(lambda path: self._upload(path, result), waiting))
        for folder, files in folders.items():
            self._step_state(folder, files, result)
        if result.uploaded:
            self._save_ledger()
        result.evicted_bytes = self._keep_bound(found)
        self._save_totals(result)
        return result

    def _save_totals(self, result: PassResult) -> None:
        t = self.totals
        t.uploaded_files += len(result.uploaded)
        t.uploaded_bytes += sum((self.ledger.get(r, {}).get("version") or {}).get("size", 0) for r in result.uploaded)
        t.removed_bytes += result.evicted_bytes
        t.pending_files, t.failing = result.pending, int(not result.ok)
        t.error = None if result.ok else next(iter(result.failed.values()))
        with contextlib.suppress(OSError):
            write_text_atomic(self.spool / STATE, json.dumps(asdict(t)) + "\n")

    def files(self) -> list[Path]:
        """Every finished file of this spool folder, in order: no hidden file (temporaries, locks, the
        ledger), nothing below a folder that is a spool folder of its own (a request's URI below the
        configured one: its own uploader sends it)."""
        found = []
        for here, dirs, names in os.walk(self.spool):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not (Path(here, d) / MARKER).exists())
            found += [Path(here, n) for n in sorted(names) if not n.startswith(".")]
        return found

    def _step_folder(self, path: Path) -> Path | None:
        for folder in path.parents:
            if folder == self.spool:
                return None
            if folder.name.startswith("global_step_") and (folder / manifest.MANIFEST).exists():
                return folder
        return None

    def _changed(self, path: Path) -> bool:
        relative = path.relative_to(self.spool).as_posix()
        version = _version(path)
        return version is not None and self.ledger.get(relative, {}).get("version") != version

    def _pace(self, size: int) -> None:
        """Hold the upload's average rate at ``RLPROF_UPLOAD_MBPS`` (0: as fast as the store takes it):
        each file starts when the files before it have had their share of the time."""
        rate = _upload_rate()
        if not rate:
            return
        with self._lock:
            start = max(time.monotonic(), self._next_start)
            self._next_start = start + size / rate
        time.sleep(max(0.0, start - time.monotonic()))

    def _upload(self, path: Path, result: PassResult) -> bool:
        """Upload ``path`` if it changed; False when its upload failed (the reason kept in ``result``)."""
        relative = path.relative_to(self.spool).as_posix()
        version = _version(path)
        if version is None or self.ledger.get(relative, {}).get("version") == version:
            return True
        self._pace(version["size"])
        try:
            self.store.put(path, self.remote(relative))
        except Exception as e:
            with self._lock:
                result.failed[relative] = _reason(e)
                result.pending += 1
            return False
        with self._lock:  # files go up several at once (``PARALLEL``)
            if _version(path) == version:  # not replaced while it was read
                self.ledger[relative] = {"version": version, "at": time.time()}
                result.uploaded.append(relative)
            else:
                result.pending += 1
        return True

    def _step_state(self, folder: Path, files: list[Path], result: PassResult) -> None:
        """The step folder's upload state, in its manifest; the manifest uploaded once its files are."""
        prefix = folder.relative_to(self.spool).as_posix() + "/"
        waiting = [f for f in files if self._changed(f)]
        data = manifest.read(folder) or {}
        if (not waiting and (data.get("upload") or {}).get("state") == DONE
                and not self._changed(folder / manifest.MANIFEST)):
            return  # in the store as it is here: a failure elsewhere is not this folder's
        failed = {k: v for k, v in result.failed.items() if k.startswith(prefix) or k == STORE}
        if failed:
            state = {"state": FAILED, "error": "; ".join(f"{k}: {v}" for k, v in sorted(failed.items())[:3]),
                     "pending": len(waiting)}
        elif waiting or data.get("state") not in manifest.TERMINAL:
            state = {"state": UPLOADING, "error": None, "pending": len(waiting)}
        else:
            state = {"state": DONE, "error": None, "pending": 0}
        state.update(destination=self.store.url(self.remote(folder.relative_to(self.spool).as_posix())),
                     finish=finish_command(self.spool) if state["state"] != DONE else None)
        if data.get("upload") != state:
            def change(current: dict) -> bool:
                if current.get("upload") == state:
                    return False
                current["upload"] = state
                return True
            manifest.rewrite(folder, change)
        if state["state"] != FAILED:
            self._upload(folder / manifest.MANIFEST, result)

    # ---- the spool's bound -----------------------------------------------------------------------------
    def _keep_bound(self, found: list[Path]) -> int:
        """Remove copies already in the store, oldest upload first, while the spool is past its bound;
        returns the bytes removed. Only step folders whose upload is done lose files (a folder still
        recording may yet read its ranks' traces: its merge, its by-stage split); manifests, the step logs
        outside step folders and anything not uploaded stay."""
        limit = self.destination.max_mb * 1024 * 1024
        sizes = {p: v["size"] for p in found if (v := _version(p)) is not None}  # this pass's walk
        total = sum(sizes.values())
        if total <= limit:
            self.totals.over_bound_bytes = 0
            return 0
        removed = 0
        uploaded = sorted(self.ledger.items(), key=lambda kv: kv[1].get("at", 0))
        done: dict[Path, bool] = {}
        for relative, entry in uploaded:
            if total - removed <= limit:
                break
            path = self.spool / relative
            if path.name == manifest.MANIFEST or _version(path) != entry.get("version"):
                continue
            folder = self._step_folder(path)
            if folder is None:
                continue
            if folder not in done:
                done[folder] = ((manifest.read(folder) or {}).get("upload") or {}).get("state") == DONE
            if not done[folder]:
                continue
            with contextlib.suppress(OSError):
                path.unlink()
                removed += sizes.get(path, 0)
                entry["evicted"] = True
        if removed:
            self._save_ledger()
            log.warning("rlprof: the spool %s passed its bound (%s MB, %s): removed %.1f MB of files already "
                        "uploaded to %s", self.spool, self.destination.max_mb, "RLPROF_SPOOL_MAX_MB",
                        removed / 1e6, self.store.uri)
        self.totals.over_bound_bytes = max(0, total - removed - limit)
        if total - removed > limit:
            log.warning("rlprof: the spool %s holds %.1f MB not yet uploaded, past its bound of %s MB: nothing "
                        "recorded is removed; uploads are failing or slower than recording", self.spool,
                        (total - removed) / 1e6, self.destination.max_mb)
        return removed


def _upload_rate() -> float:
    """``RLPROF_UPLOAD_MBPS`` in bytes a second (0: no limit)."""
    try:
        return max(0.0, float(os.environ.get(RATE_ENV, DEFAULT_MBPS))) * 1e6
    except ValueError:
        return DEFAULT_MBPS * 1e6


def _reason(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}"[:300] if text else type(e).__name__


# ---- running it --------------------------------------------------------------------------------------------
def running(spool: Path) -> bool:
    """Whether an uploader holds this spool folder's lock now."""
    try:
        with open(spool / LOCK, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(lock, fcntl.LOCK_UN)
            return False
    except BlockingIOError:
        return True
    except OSError:
        return False


def ensure_running(spool: Path) -> None:
    """Start this spool folder's uploader unless one runs: a new Python process (spawned, not forked),
    in a session of its own so a signal to the engine's process group does not end a pending upload."""
    if running(spool):
        return
    with open(spool / LOG, "ab") as out:
        subprocess.Popen([sys.executable, "-m", "rlprof_plugins.store.upload", str(spool), "--parent",
                          str(os.getpid())], stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                         start_new_session=True, close_fds=True)


def yield_the_cpu() -> None:
    """Run this process only on CPU time no other process wants (Linux's ``SCHED_IDLE``; elsewhere the
    lowest niceness): the engine's processes always come first, and an upload waits a moment instead."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        with contextlib.suppress(OSError):
            os.nice(19)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def serve(spool: Path, parent: int | None, poll: float = POLL_S) -> int:
    """Run passes until the parent is gone and nothing waits (or failures outlast ``LINGER_S`` after it)."""
    destination = destination_at(spool)
    if destination is None or destination.spool != spool:
        log.error("rlprof: %s is not a spool folder (no %s)", spool, MARKER)
        return 2
    with open(spool / LOCK, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return 0  # another uploader has it
        yield_the_cpu()
        lock.truncate(0)
        lock.write(str(os.getpid()))  # who holds it, for a person (or a test) looking
        lock.flush()
        uploader = Uploader(destination)
        failures, orphaned_at = 0, None
        while True:
            result = uploader.run_pass()
            failures = 0 if result.ok else failures + 1
            if not result.ok:
                log.warning("rlprof: uploads to %s failed (%d waiting): %s; retrying", destination.uri,
                            result.pending, next(iter(result.failed.values())))
            if parent is not None and not _alive(parent):
                orphaned_at = orphaned_at or time.time()
                if result.ok and not result.pending:
                    return 0
                if time.time() - orphaned_at > LINGER_S:
                    log.error("rlprof: giving up on %s for now; finish with: %s", destination.uri,
                              finish_command(spool))
                    return 1
            time.sleep(poll if result.ok else BACKOFF_S[min(failures, len(BACKOFF_S)) - 1])


def finish(spool: Path, attempts: int = 3) -> PassResult:
    """Upload what waits in ``spool`` now (``rlprof upload``), a few passes; the last pass's result."""
    destination = destination_at(spool)
    if destination is None:
        raise ValueError(f"{spool} is not a spool folder of an object store output (no .rlprof-destination.json)")
    uploader = Uploader(destination)
    result = PassResult()
    for attempt in range(attempts):
        result = uploader.run_pass()
        if result.ok and not result.pending:
            return result
        time.sleep(BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlprof_plugins.store.upload")
    parser.add_argument("spool", type=Path)
    parser.add_argument("--parent", type=int, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    return serve(args.spool.resolve(), args.parent)


if __name__ == "__main__":
    sys.exit(main())
