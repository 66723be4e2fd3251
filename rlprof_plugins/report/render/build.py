"""``rlprof report``'s work apart from the command line: the numbers, what to say about them, the outputs.

``build`` makes the rows of a planned root, compares two steps when asked,
and names everything a reader must know first: steps that failed, could
not be read, are still recording or lack ranks, a ``--steps`` range that
holds no step, a root with nothing in it. ``write_*`` put the page, the
JSON and the CSV files in place atomically.
"""

from __future__ import annotations

import csv
import io
import json
from itertools import count, groupby, zip_longest
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from ...atomic_files import write_text_atomic
from ...trace.analysis.iteration_names import SOURCE_TITLES, SOURCES
from .summary import step_label
from .anomalies import note as anomaly_note
from ..execute.passes import LocalPasses, Passes
from .compare import compare
from . import flame
from .fleet import fleet_rows, replica_table
from .page import render_parts
from .rollout_view import measured
from ..plan.planner import plan_root
from ..plan.view import RootView
from .steps import flat_rows, server_rows


@dataclass
class Built:
    report: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    compared: dict[str, Any] | None = None
    analysis: dict[str, Any] | None = None  # where the traces were read (``analysis``), for the JSON
    # a fleet's replica-steps that failed or lost a file and are not their step's row (its slowest replica's)
    others_unread: list[dict[str, Any]] = field(default_factory=list)
    # ROOT is a folder of this machine (not a listed one, ``--ray``): the page links each step's files
    # relative to where the page is written, else relative to ROOT
    root_here: bool = True

    @property
    def nothing(self) -> bool:
        """No step below the root had an engine iteration, a memory snapshot that could be read, or a flight
        recorder dump: what the default configuration writes (step metrics, dumps) is always something."""
        return not any(row["iterations"] or row.get("anomalies")
                       or any("error" not in m for m in row.get("memory", {}).values())
                       for row in self.report["steps"])

    @property
    def unread(self) -> list[dict[str, Any]]:
        """Steps that failed, could not be read, or lost a rank file (in a fleet: of any replica)."""
        return [row for row in self.report["steps"] if row["error"] or row["unreadable"]] + self.others_unread

    def to_json(self) -> dict[str, Any]:
        return {**self._head(), "steps": [_step_json(row) for row in self.report["steps"]]}

    def json_parts(self) -> Iterator[str]:
        """``to_json()`` as text, a step at a time (a fleet's replica-steps are never one string; ``steps``
        comes last)."""
        head = json.dumps(self._head(), indent=1)
        yield head[:-2] + ',\n "steps": [\n'
        for k, row in enumerate(self.report["steps"]):
            yield (",\n" if k else "") + json.dumps(_step_json(row), indent=1)
        yield "\n]\n}\n"

    def _head(self) -> dict[str, Any]:
        out = {"root": self.report["root"], "steps_found": self.report["steps_found"], "notes": self.notes,
               "compare": self.compared}
        if "replicas" in self.report:
            out["replicas"] = self.report["replicas"]
        if self.analysis is not None:
            out["analysis"] = self.analysis
        return out


def _step_json(row: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if k == "replicas" else v for k, v in row.items() if not k.startswith("_")}


def build(view: RootView, passes: Passes, *, steps: tuple[int, int] | None = None,
          pair: tuple[int, int] | None = None, progress: Callable[[str], None] | None = None,
          every_number: bool = True, root_here: bool = True) -> Built:
    """The report of a planned root (``plan.planner.plan_root``): one server's steps, or a fleet's side by side
    (``fleet``); its traces and memory snapshots read by ``passes`` (``report.execute.passes``). ``steps``: the range
    the plan was narrowed to, for the notes. Without ``every_number`` (the page alone: no JSON, no CSV), a
    fleet's rows do not keep the measured numbers they were made of. ``root_here``: ROOT is a folder of this
    machine."""
    root = view.root
    if view.fleet:
        report = fleet_rows(view, passes, progress, keep=pair or (), every_number=every_number)
    else:
        report = server_rows(view, view.servers[0], passes, progress, keep=pair or ())
    built = Built(report, root_here=root_here)
    found = [s for s in report["steps_found"] if s is not None]
    if not report["steps_found"]:
        built.notes.append(f"nothing to report: {root} holds no global_step_N folder and no trace")
    elif steps and not report["steps"]:
        built.notes.append(f"nothing to report: no step in {steps[0]}-{steps[1]} "
                           f"(steps found: {_ranges(found) or 'none'})")
    for row in report["steps"]:
        name = step_label(row["global_step"], row["directory"]) + (
            f" (slowest replica {row['replica']})" if "replica" in row else "")
        if row["state"] == "failed":
            built.notes.append(f"failed: {name}: {row['error']}")
        elif row["error"]:
            built.notes.append(f"unreadable: {name}: {row['error']}")
        elif row["state"] in ("recording", "exporting"):
            built.notes.append(f"{name} is still {row['state']}: its numbers are of what is on disk now")
        elif not row["ranks"] and not row["unreadable"] and not row.get("anomalies"):
            built.notes.append(f"{name}: no rank trace in {row['directory']}"
                               + (" (memory snapshots only)" if row.get("memory") else ""))
        kept = f" (kept: {', '.join(row['ranks'])})" if row["ranks"] else ""
        built.notes += [f"unreadable: {name}: {error}{kept}" for error in row["unreadable"]]
        if row["without_iterations"]:
            built.notes.append(f"{name}: no engine iteration in {', '.join(row['without_iterations'])}: none of "
                               f"{'; '.join(SOURCE_TITLES[source] for source in SOURCES)}: its operators are counted, "
                               "its iterations are not")
        built.notes += [f"unreadable: {name}: memory snapshot {m['path']}: {m['error']}"
                        for m in row.get("memory", {}).values() if "error" in m]
        built.notes += [f"{name}: {line} (`rlprof collect` gathers a step spanning nodes)"
                        for line in row.get("missing_lines", [])]
        built.notes += [f"{name}: {a}" for a in row.get("assumed_ranks", [])]
        built.notes += [anomaly_note(name, a) for a in row.get("anomalies", [])]
    chosen = {row["global_step"]: row.get("replica") for row in report["steps"]}
    built.others_unread = [p for p in report.get("replica_problems", ()) if chosen.get(p["global_step"]) != p["replica"]]
    for p in built.others_unread:
        name = f"{step_label(p['global_step'], p['directory'])} (replica {p['replica']})"
        if p["error"]:
            built.notes.append(f"{'failed' if p['state'] == 'failed' else 'unreadable'}: {name}: {p['error']}")
        built.notes += [f"unreadable: {name}: {error}" for error in p["unreadable"]]
    built.notes += [f"step metrics: {w}" for w in report["warnings"]]
    if pair:
        built.compared = compare(report, *pair)
    built.notes += view.notes
    return built


def build_here(root: Path, *, use_cache: bool = True) -> Built:
    """The report of ``root`` planned and read on this machine, as ``rlprof report ROOT`` makes it."""
    return build(plan_root(root, use_cache=use_cache), LocalPasses(root, use_cache=use_cache))


def _ranges(steps: list[int]) -> str:
    """Steps as runs: ``1-3, 7``."""
    runs = [list(run) for _, run in groupby(sorted(steps), key=lambda s, k=count(): s - next(k))]
    return ", ".join(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]) for run in runs)


def write_page(built: Built, path: Path) -> None:
    # a listed ROOT: the links to each step's files stay relative to ROOT (the files are on the nodes)
    write_text_atomic(path, render_parts(built.report, built.notes, built.compared,
                                         page=path if built.root_here else None))


def write_json(built: Built, path: Path) -> None:
    write_text_atomic(path, built.json_parts())


def write_csv(built: Built, folder: Path) -> list[Path]:
    """The CSV files (docs/report.md lists them); ranks, operators and iterations of the steps the page
    details (``steps.DETAILED``, the newest; ``--steps`` for others)."""
    steps = built.to_json()["steps"]
    tables = {
        "steps": flat_rows(built.report),
        "ranks": [{"global_step": row["global_step"], "rank": rank,
                   **{k: v for k, v in t.items() if k not in ("device", "device_by_stage")},
                   **{f"device_{k}": v for k, v in (t["device"] or {}).items()},
                   "slowest_iterations": row["slowest_rank_iterations"].get(rank)}
                  for row in steps for rank, t in row.get("rank_time", {}).items()],
        # each rank's device partition: over its iterations' one window (scope "rank"), and per stage, the sum
        # of the stage's iterations, each its own window (scope "stage")
        "device": [{"global_step": row["global_step"], "rank": rank, "scope": scope, "stage": stage, **part}
                   for row in steps for rank, t in row.get("rank_time", {}).items()
                   for scope, stage, part in ([("rank", None, t["device"])] if t["device"] else [])
                   + [("stage", stage, part) for stage, part in sorted(t.get("device_by_stage", {}).items())]],
        "operators": [{"global_step": row["global_step"], "kind": kind, **op}
                      for row in steps for kind, ops in row.get("operators", {}).items() for op in ops],
        "iterations": [{"global_step": row["global_step"], **dict(zip(("iteration", "stage", "ms", "batch",
                                                                        "slowest_rank"), it)),
                        **{f"device_{k}": v for k, v in (device or {}).items()}}
                       for row in steps for it, device in zip_longest(row.get("timeline", []),
                                                                      row.get("iteration_device", []))],
        "python": [r for row in steps for r in flame.csv_rows(row)],
        # a row per measured step and rank: its peak batch, span, tail, and the running batch at each point of
        # the occupancy curve (``occupancy_1`` the first)
        "rollout": [{**_step_of(row), "rank": rank, **{k: r.get(k) for k in ROLLOUT_COLUMNS},
                     **{f"occupancy_{k}": b for k, b in enumerate(r.get("occupancy") or [], 1)}}
                    for row in steps for rank, r in sorted(measured(row, "rollout").items())],
        # a row per RL phase each rank ran (``metrics/phases.py``); the first after the rank's last iteration
        # says how long the engine waited for it (``after_generation_ms``: the trainer's turn)
        "phases": [{**_step_of(row), "rank": rank, **{k: p.get(k) for k in PHASE_COLUMNS}}
                   for row in steps for rank, mine in sorted(measured(row, "phases").items())
                   for p in mine.get("records", [])],
        # a row per step and each of its longest requests (``metrics/requests.py``), ``place`` 1 the longest
        "requests": [{**_step_of(row), "place": place, **request}
                     for row in steps for place, request in enumerate(row.get("requests") or [], 1)],
    }
    if "replicas" in built.report:
        tables["replicas"] = replica_table(built.report)
    if built.compared:
        tables["compare"] = [{"kind": kind, **op} for kind, ops in built.compared["operators"].items() for op in ops]
    written = []
    for name, rows in tables.items():
        out = io.StringIO()
        columns = list(dict.fromkeys(k for r in rows for k in r)) or ["global_step"]
        writer = csv.DictWriter(out, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
        path = folder / f"{name}.csv"
        write_text_atomic(path, out.getvalue())
        written.append(path)
    return written


ROLLOUT_COLUMNS = ("peak_batch", "span_ms", "tail_ms", "tail_share", "tail_iterations", "tail_tokens")
PHASE_COLUMNS = ("phase", "call", "started_at", "ms", "weight_version", "detail", "after_generation_ms")


def _step_of(row: dict[str, Any]) -> dict[str, Any]:
    """The columns naming a CSV row's step: its global step, and in a fleet its replica."""
    return {"global_step": row["global_step"], **({"replica": row["replica"]} if "replica" in row else {})}
