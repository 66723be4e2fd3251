"""Keep only the newest N global-step folders of a server (opt-in).

A folder is removed only when its manifest says every writer finished
(``done`` or ``failed``), only if it is a real ``global_step_<N>`` folder
directly inside the output root (no symlinks), and each removal is logged.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from . import manifest
from .._log import logger
from .layout import step_folders


def prune(root: Path, keep: int) -> list[Path]:
    """Remove complete step folders beyond the newest ``keep``; returns them."""
    removed = []
    for step, folder in step_folders(root)[::-1][keep:]:  # the newest first
        data = manifest.read(folder)
        if data is None or data.get("state") not in manifest.TERMINAL:
            logger.info("rlprof: keeping %s beyond keep_last_steps=%d: not complete", folder, keep)
            continue
        shutil.rmtree(folder)
        removed.append(folder)
        logger.info("rlprof: removed %s (keep_last_steps=%d)", folder, keep)
    return removed
