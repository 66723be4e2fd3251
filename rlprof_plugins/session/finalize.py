"""What happens once every writer of a step folder has finished.

The writer whose manifest update completes the step (the last rank or the
API server, whichever is last) calls ``on_step_complete``. It runs in a
thread of its own, so neither the engine nor an exporter waits for it:

1. with the ``merge`` option, ``rlprof merge`` of the folder in a child
   process (JSON work never holds an engine process's GIL); the manifest
   gets a ``merge`` section, ``exporting`` while it runs, so the step's
   overall state says ``done`` only once the merged trace exists;
2. with ``keep_last_steps``, retention of older complete step folders,
   decided before the step says ``done`` (with a merge, before the merge
   section does), the folders deleted after.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from ..store import manifest, retention
from ..trace.format import naming
from .._log import logger


WRITER = "merge"


def on_step_complete(directory: Path, data: dict[str, Any]) -> threading.Thread | None:
    """Called by the writer that completed the step, right after its update.
    The merge is announced (``exporting``) before returning, so no status
    read after this call can see the step ``done`` without its merged trace;
    without a merge, retention decides here, so no status read after ``done``
    sees more than ``keep_last_steps`` step folders (``retention``)."""
    try:
        merging = bool(data.get("merge")) and any(f.get("role") == "worker" and f.get("kind", "trace") == "trace"
                                                  for f in data.get("files", []))
        moved: list[Path] = []
        if merging:
            _record(directory, data["session_id"], "exporting")
        else:
            moved = _prune(directory, data)
        t = threading.Thread(target=finalize_step, args=(directory, data, merging, moved), name="rlprof-finalize",
                             daemon=True)
        t.start()
        return t
    except Exception:  # a background nicety must never take a process down
        logger.exception("rlprof: finishing %s failed", directory)
        return None


def finalize_step(directory: Path, data: dict[str, Any], merging: bool, moved: list[Path] | None = None) -> None:
    try:
        if merging:  # retention decides before the merge says done
            merged = merge_step(directory)
            moved = _prune(directory, data)
            _record(directory, data["session_id"], *merged)
        retention.discard(moved or [])
    except Exception:
        logger.exception("rlprof: finishing %s failed", directory)


def _prune(directory: Path, data: dict[str, Any]) -> list[Path]:
    keep = data.get("keep_last_steps")
    return retention.prune(directory.parent, int(keep)) if keep else []


def _record(directory: Path, session_id: str, state: str, files: list[dict] | None = None,
            error: str | None = None) -> None:
    section = {"role": WRITER, "state": state, "files": files or [], "error": error}
    manifest.update(directory, session_id=session_id, writer=WRITER, section=section, header={})


def merge_step(directory: Path) -> tuple[str, list[dict], str | None]:
    """Merge the step's traces (a child process); returns the merge section's state, files and error."""
    from ..store.step_files import merge_in_subprocess

    try:
        outputs = merge_in_subprocess(directory)
    except Exception as e:
        logger.warning("rlprof: merging %s failed: %s", directory, e)
        return "failed", [], f"{type(e).__name__}: {e}"
    files = []
    for out in outputs:
        name = naming.parse(out.name)
        stage = (name.stage if name else None) or "all"
        files.append({"path": str(out.relative_to(directory)), "rank": "all", "role": WRITER, "kind": "trace",
                      "stage": stage,
                      "bytes": out.stat().st_size})
    logger.info("rlprof: merged %s", ", ".join(str(o) for o in outputs))
    return "done", files, None
