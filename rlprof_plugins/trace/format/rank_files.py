"""The trace files of one step as the trace tools take them: each rank's file, and the files that merge into one.

Who decides which files of a folder these are (the manifest, or the files'
names) is ``store.step_files``; the merge, rename and report read only these
records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from . import naming


@dataclass
class RankFile:
    """One input of a merge."""

    path: Path
    label: str  # the rank's name (``naming.rank_label``: "rank1", "TP-1-PP-0") or "frontend"
    role: str = "worker"  # or "frontend"
    order: tuple = ()
    # torch_npu's trace_view.json: an event array whose ``ts`` are absolute
    # (epoch) microseconds, as strings; Kineto traces count from a base time.
    absolute_time: bool = False
    position: dict[str, int] = field(default_factory=dict)  # tp/pp/dp/ep where known
    host: str | None = None  # the host whose clock it was recorded by, where the manifest says

    @property
    def place(self) -> str:
        """The tp/pp place where the label does not spell it (``tp1 pp1`` of ``rank3``), else ``""``."""
        if not self.label.startswith("rank"):  # an SGLang label (TP-1-PP-1) names it already
            return ""
        return " ".join(f"{k}{v}" for k, v in self.position.items())

    def describe(self) -> str:
        return f"{self.label} ({self.place})" if self.place else self.label


@dataclass
class MergeGroup:
    """The files that become one merged trace (one per stage in by-stage sessions)."""

    directory: Path
    stage: str | None
    inputs: list[RankFile]
    group: str = ""  # SGLang profile id / vLLM prefix, when several sessions share a folder
    missing: list[str] = field(default_factory=list)  # ranks the step has and this merge lacks, with where
    merged_dir: Path | None = None  # the folder its merged trace goes to by default (the step folder's layout says)

    @property
    def output(self) -> Path | None:
        """Its merged trace's default path: ``merged[.<group>][.<stage>].pt.trace.json.gz`` in ``merged_dir``,
        apart from the rank traces, so per-rank tools do not take it for one more rank."""
        return None if self.merged_dir is None else self.merged_dir / naming.merged_file(self.group, self.stage)

    @property
    def hosts(self) -> set[str]:
        """The hosts (clocks) its inputs were recorded on, where known."""
        return {rf.host for rf in self.inputs if rf.host}


class Unplaced(NamedTuple):
    """A file of a step folder that no merge takes, and why."""

    path: Path
    reason: str
    role: str | None = None  # the file's role where it is known ("worker" or "frontend")


@dataclass
class Plan:
    groups: list[MergeGroup]
    unplaced: list[Unplaced]
    # ranks given to traces that record none, each with its file: "rank0: <file> (...)"
    assumed: list[str] = field(default_factory=list)


def positions_from_rank(rank: int, parallel: dict | None) -> dict[str, int]:
    """tp/pp position of a global rank inside one engine (vLLM orders ranks
    tp fastest, then pp)."""
    if not parallel:
        return {}
    tp = int(parallel.get("tp") or 1)
    pp = int(parallel.get("pp") or 1)
    pos = {"tp": rank % tp}
    if pp > 1:
        pos["pp"] = (rank // tp) % pp
    return pos


def missing_line(group: MergeGroup) -> str | None:
    """The ranks ``group`` lacks, in one line however many (``2 of 128 ranks here; missing rank2-rank127``):
    what summary, merge and the report say, once per step and stage. None: it lacks none."""
    return missing_text(sum(1 for rf in group.inputs if rf.role == "worker"), group.missing)


def missing_text(here: int, missing: list[str]) -> str | None:
    """``missing_line`` of a group holding ``here`` worker ranks and lacking ``missing`` (``_missing``'s
    names, or its one ``N of M ranks`` count where the names are not known)."""
    if not missing:
        return None
    runs: list[list] = []  # [first, last] of plain rank<N> names in a row, or [text]
    for name in missing:
        parsed = naming.parse_rank_label(name)
        number = parsed[0] if parsed and name == naming.rank_label(parsed[0]) else None
        if number is not None and runs and len(runs[-1]) == 2 and runs[-1][1] == number - 1:
            runs[-1][1] = number
        else:
            runs.append([number, number] if number is not None else [name])
    names = [naming.rank_label(r[0]) if len(r) == 2 and r[0] == r[1] else
             f"{naming.rank_label(r[0])}-{naming.rank_label(r[1])}" if len(r) == 2 else r[0] for r in runs]
    shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    counted = missing[0].split(" of ", 1)
    if len(missing) == 1 and len(counted) == 2 and counted[0].isdigit():  # only the count is known
        return f"{here} ranks here; missing {missing[0]}"
    return f"{here} of {here + len(missing)} ranks here; missing {shown}"
