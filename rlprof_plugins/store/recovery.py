"""A kept recording finished by hand: the step's manifest says ``done``.

When an export fails after recording, the writer's manifest section says
``failed`` with the reason, lists the files kept, and names the command that
finishes the job (``rlprof stitch``, ``rlprof split-stages``, ``rlprof
npu-analyse``). Each of those commands, once its output is written, calls
``finished``: the section of the step folder's manifest that lists the
command's input moves to ``done``, lists the output, and keeps what happened
in ``recovered`` (the command, when, and the error it repaired). A command
that fails changes nothing: the section stays ``failed``.

Files of no manifest (a trace stitched or split by hand) are left as they are.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import manifest

DEPTH = 3  # a kept file lies at most this deep in its step folder (ranks/.rlprof-chunks/..., <stage>/...)


@dataclass(frozen=True)
class Output:
    """A file the finishing command wrote, described like the exporter's."""

    path: Path
    kind: str = "trace"
    stage: str | None = None


def step_folder_of(path: Path) -> Path | None:
    """The nearest folder above ``path`` that holds a manifest."""
    folder = Path(path).resolve().parent
    for _ in range(DEPTH):
        if (folder / manifest.MANIFEST).is_file():
            return folder
        folder = folder.parent
    return None


def finished(inputs: list[Path], outputs: list[Output], command: str, *, consumed: bool = False) -> list[str]:
    """Mark the failed sections listing one of ``inputs`` as finished by
    ``command``, listing ``outputs`` (and, with ``consumed``, no longer the
    inputs, which the command's output replaces). Returns the writers
    recovered; an empty list when no manifest lists the inputs."""
    if not inputs:
        return []
    directory = step_folder_of(inputs[0])
    if directory is None:
        return []
    wanted = {_relative(directory, p) for p in inputs}
    recovered: list[str] = []

    def change(data: dict[str, Any]) -> bool:
        for writer, section in data.get("writers", {}).items():
            listed = {f.get("path") for f in section.get("files", [])}
            if section.get("state") != "failed" or not listed & wanted:
                continue
            rank, role = _owner(section)
            kept = [f for f in section["files"] if not (consumed and f.get("path") in wanted)]
            new = [_describe(directory, o, rank, role) for o in outputs]
            known = {f["path"] for f in new}
            section["files"] = [f for f in kept if f.get("path") not in known] + new
            section["recovered"] = {"by": command, "at": time.time(), "error": section.get("error")}
            section["state"], section["error"] = "done", None
            recovered.append(writer)
        return bool(recovered)

    manifest.rewrite(directory, change)
    return recovered


def _relative(directory: Path, path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(directory))
    except ValueError:
        return str(path)


def _owner(section: dict[str, Any]) -> tuple[str, str]:
    files = section.get("files") or [{}]
    return files[0].get("rank", "?"), files[0].get("role", section.get("role", "worker"))


def _describe(directory: Path, out: Output, rank: str, role: str) -> dict[str, Any]:
    path = Path(out.path)
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else path.stat().st_size
    return {"path": _relative(directory, out.path), "rank": rank, "role": role, "kind": out.kind,
            "stage": out.stage or "all", "bytes": size}
