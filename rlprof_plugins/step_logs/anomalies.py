"""The flight recorder's dumps read back: each dump's ``anomaly.json`` below a step folder's ``flight/``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..metrics.flight_dump import ANOMALY_FILE, folder_seconds
from ..store.layout import FLIGHT_DIR


def read_anomalies(step_folder: Path) -> list[dict[str, Any]]:
    """A step folder's dumps as their ``anomaly.json`` says, with ``path`` (the dump's folder), oldest
    first; a dump whose file cannot be read is listed by its folder's name with ``error``."""
    base = step_folder / FLIGHT_DIR
    out = []
    for entry in sorted(base.iterdir()) if base.is_dir() else []:
        if not entry.is_dir() or entry.name.startswith("."):
            continue
        try:
            data = json.loads((entry / ANOMALY_FILE).read_text())
            if not isinstance(data, dict):
                raise ValueError("not an object")
        except (OSError, ValueError) as e:
            found = folder_seconds(entry.name)
            data = {"reason": found[1] if found else None, "error": f"{type(e).__name__}: {e}"}
        data["path"] = str(entry)
        out.append(data)
    return out
