"""Which process writes a step folder, and what happens when it is gone.

Every section a process writes into ``manifest.json`` carries its identity
(host, pid, the process's start time and the machine's boot id), so a reader
on the same machine can tell a writer that is still exporting from one that
was killed (SIGKILL, the OOM killer, a crashed engine): a dead writer would
otherwise leave its step ``exporting`` for good, also after a restart.
``reap`` marks such writers ``failed`` with the reason and removes the
temporary files they left (``atomic_files.atomic_target`` names); it runs at the
next start request and in the ``rlprof`` tools. Recorded data is never
removed: only a dead writer's unfinished temporaries, which no process will
complete.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import manifest
from .layout import step_folders
from .processes import alive
from .._log import logger


def reap(directory: Path) -> list[str]:
    """Mark the writers of one step folder whose process is gone ``failed``;
    remove the temporaries left once no writer there is still at work.
    Returns the names of the writers marked."""
    marked: list[str] = []

    def change(data: dict[str, Any]) -> bool:
        for name, section in data.get("writers", {}).items():
            before = section.get("state")
            if before in manifest.ACTIVE and alive(section.get("process")) is False:
                p = section["process"]
                section["state"] = "failed"
                section["error"] = (f"process gone: pid {p['pid']} on {p['host']} ended while {before}; "
                                    "what it had not written is lost")
                marked.append(name)
        return bool(marked)

    data = manifest.rewrite(directory, change)
    if data is not None and not any(s.get("state") in manifest.ACTIVE for s in data.get("writers", {}).values()):
        for tmp in directory.rglob(".*.tmp"):  # ranks/, merged/, ... hold them beside their files
            try:
                tmp.unlink()
            except OSError:
                pass
    for name in marked:
        logger.warning("rlprof: %s: writer %s marked failed (its process is gone)", directory, name)
    return marked


def reap_all(root: Path) -> dict[str, list[str]]:
    """``reap`` every step folder under ``root`` (or ``root`` itself) that a
    manifest says is still at work. Never raises: a tool or a start request
    must go on regardless."""
    root = Path(root)
    found: dict[str, list[str]] = {}
    try:
        folders = [root] if (root / manifest.MANIFEST).exists() else [p for _, p in step_folders(root)]
        for folder in folders:
            data = manifest.read(folder)
            if data is None or data.get("state") not in manifest.ACTIVE:
                continue
            marked = reap(folder)
            if marked:
                found[str(folder)] = marked
    except Exception as e:
        logger.warning("rlprof: checking %s for writers that are gone failed: %s", root, e)
    return found
