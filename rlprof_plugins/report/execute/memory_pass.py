"""The memory pass as a step shows it: each rank's snapshot read (``trace.analysis.memory_snapshot``), by rank,
an unreadable one kept with the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable


def step_memory(folder: str, files: list[tuple[str, str]], read: Callable[[Path], dict[str, Any]]
                ) -> dict[str, dict[str, Any]]:
    """Each rank's memory over the window, by rank: ``files`` (rank, path below ROOT) as the plan found them
    in the step folder ``folder`` (below ROOT), each read by ``read`` (the report's executor of passes); an
    unreadable snapshot keeps its entry with ``error``."""
    out = {}
    for rank, rel in files:
        entry: dict[str, Any] = {"path": str(Path(rel).relative_to(folder))}
        try:
            entry.update(read(Path(rel)))
        except Exception as e:
            entry["error"] = f"{type(e).__name__}: {e}"
        out[rank] = entry
    return out
