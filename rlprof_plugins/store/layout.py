"""Where a session's files go.

One rule is enforced here for every writer: nothing lands outside the
configured output directory. How each file is written (to a temporary name,
then renamed into place) is ``atomic_files``.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import RequestError

STEP_DIR_PREFIX = "global_step_"
_STEP_DIR = re.compile(rf"^{STEP_DIR_PREFIX}(\d+)$")
# A step folder's subfolders. Each rank folder holds the worker traces of one
# session and nothing else, so per-rank analysis tools (HolisticTraceAnalysis
# loads every *.json/*.gz of a folder as one rank) and slime's analyzer open it
# as it is; the manifest, the API-server trace and merged outputs live apart.
RANKS, FRONTEND, MERGED = "ranks", "frontend", "merged"
MEMORY = "memory"  # each rank's allocator snapshot over the window (``memory``), apart from the traces
FLIGHT_DIR = "flight"  # ``global_step_<N>/flight/<time>-<reason>/``: the flight recorder's dumps, apart from sessions
STEPS_DIR = "steps"  # ``<root>/steps/<rank>.jsonl``: every RL step's metrics, traced or not (``step_metrics``)


@dataclass(frozen=True)
class Placement:
    """Where one session's files go: the subfolders of a global-step folder,
    or one flat folder (no global step: the engine's own layout)."""

    root: Path
    step: bool

    def ranks(self, stage: str | None = None) -> Path:
        """Worker traces: ``ranks/`` (whole sessions) or ``<stage>/`` (by-stage sessions)."""
        return self.root / (stage or RANKS) if self.step else self.root

    def stage_template(self) -> str:
        """The folder of each stage's traces, ``{stage}`` standing for the stage
        (``trace.rewrite.stage_split`` fills it in)."""
        return str(self.root / "{stage}") if self.step else str(self.root)

    def frontend(self) -> Path:
        return self.root / FRONTEND if self.step else self.root

    def merged(self) -> Path:
        return self.root / MERGED if self.step else self.root

    def memory_file(self, rank: str, worker_name: str) -> Path:
        """A rank's memory snapshot: ``memory/<rank>.pickle`` of a step folder, or
        ``<worker>.<ns>.memory.pickle`` beside its traces (no global step)."""
        if self.step:
            return self.root / MEMORY / f"{rank}.pickle"
        return self.root / f"{worker_name}.{time.time_ns()}.memory.pickle"


def step_of(folder: Path) -> int | None:
    """The global step a ``global_step_<N>`` folder's name says, or None."""
    m = _STEP_DIR.match(folder.name)
    return int(m.group(1)) if m else None


def step_folders(root: Path) -> list[tuple[int, Path]]:
    """The ``global_step_<N>`` folders directly inside ``root``, by N ascending
    (real folders only: a symlink is never taken for a server's own folder)."""
    found = []
    for p in root.iterdir() if root.is_dir() else []:
        step = step_of(p)
        if step is not None and p.is_dir() and not p.is_symlink():
            found.append((step, p))
    return sorted(found)


def only_flight(folder: Path) -> bool:
    """Whether a step folder holds nothing but the flight recorder's dumps (``flight/``): no session wrote it."""
    try:
        return {p.name for p in folder.iterdir() if not p.name.startswith(".")} == {FLIGHT_DIR}  # (empty: a step starting)
    except OSError:
        return False


def session_dir(root: str | os.PathLike, global_step: int | None) -> Path:
    """The folder a session writes to: ``root`` or ``root/global_step_<N>``.

    Without a global step the layout is the engine's native one (files
    directly in ``root``), so users who do not ask see no change.
    """
    base = Path(root).resolve()
    if global_step is None:
        return base
    if isinstance(global_step, bool) or not isinstance(global_step, int) or global_step < 0:
        raise RequestError("global_step", f"must be an integer >= 0, got {global_step!r}")
    return contained(base, f"{STEP_DIR_PREFIX}{global_step}", field="global_step")


def contained(base: Path, name: str, *, field: str) -> Path:
    """``base/name``, refusing any name that would resolve outside ``base``."""
    target = (base / name).resolve()
    if target == base or base not in target.parents:
        raise RequestError(field, f"would place files outside the output directory: {name!r}")
    return target


def read_piece(path: Path, offset: int, length: int) -> dict:
    """``length`` bytes of a written file from ``offset`` and its whole size
    (one piece of ``GET /profile_file``, wherever it is read)."""
    with open(path, "rb") as f:
        f.seek(offset)
        return {"data": f.read(length), "size": os.fstat(f.fileno()).st_size}
