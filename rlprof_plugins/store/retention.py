"""Keep only the newest N global-step folders of a server (opt-in).

A folder is removed only when its manifest says every writer finished
(``done`` or ``failed``), or when it holds nothing but the flight recorder's
dumps (each written whole), only if it is a real ``global_step_<N>`` folder
directly inside the output root (no symlinks), and each removal is logged.

Removal is in two moves, so a step can report ``done`` only once it is
decided and never waits for it: ``prune`` renames each folder to remove
into a hidden name in the same root (one atomic rename each: from then on
no listing of step folders sees it), before the step that triggered it says
``done``; ``discard`` deletes the renamed folders afterwards, off the path
that reports. A process killed between the two leaves a renamed folder
behind; each renamed folder names the process that moved it
(``REMOVER``), and the next ``prune`` on that root hands the ones whose
process is gone to its ``discard`` too.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from . import manifest, processes
from .._log import logger
from .layout import only_flight, step_folders

REMOVING = ".rlprof-removing."  # a pruned folder on its way out (not a step folder any more)
REMOVER = "rlprof-removing.json"  # inside it: the process that moved it (``processes.identity``)


def prune(root: Path, keep: int) -> list[Path]:
    """Take complete step folders beyond the newest ``keep`` out of the root's
    step folders; returns where they went, for ``discard``."""
    moved = _left_behind(root)
    for step, folder in step_folders(root)[::-1][keep:]:  # the newest first
        data = manifest.read(folder)
        if data is None and only_flight(folder):
            pass  # the flight recorder's dumps alone (each written whole): they go with their step
        elif data is None or data.get("state") not in manifest.TERMINAL:
            logger.info("rlprof: keeping %s beyond keep_last_steps=%d: not complete", folder, keep)
            continue
        gone = root / f"{REMOVING}{folder.name}.{os.getpid()}"
        try:
            os.rename(folder, gone)
        except OSError as e:  # another process pruned it first, or the mount refuses
            logger.info("rlprof: could not remove %s: %s", folder, e)
            continue
        try:
            (gone / REMOVER).write_text(json.dumps(processes.identity()))
        except OSError:
            pass  # it goes with discard below all the same; only a kill right now would leave it
        moved.append(gone)
        logger.info("rlprof: removed %s (keep_last_steps=%d)", folder, keep)
    return moved


def _left_behind(root: Path) -> list[Path]:
    """Folders an earlier prune moved aside whose process is gone (killed before its discard).
    One whose process runs, or cannot be told (another host, no record), is left to it."""
    found = []
    for path in sorted(root.glob(REMOVING + "*")):
        try:
            remover = json.loads((path / REMOVER).read_text())
        except (OSError, ValueError):
            continue
        if path.is_dir() and not path.is_symlink() and processes.alive(remover) is False:
            logger.info("rlprof: removing %s, left behind by a process that is gone", path)
            found.append(path)
    return found


def discard(moved: list[Path]) -> None:
    """Delete what ``prune`` moved aside."""
    for path in moved:
        shutil.rmtree(path, ignore_errors=True)
