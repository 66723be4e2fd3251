"""Which trace files of a step folder belong together, and whose they are.

With a manifest (written by the plugin) every file's rank, stage and role
are read from it. Without one (a folder written by a native engine, or a
session without a global step) the names say it: every form a tested vLLM
or SGLang release, torch_npu or rlprof writes is known to ``naming`` (one
merge group per session and stage, holding every rank). A name that carries
no rank (vLLM's env era: torch's ``<host>_<pid>`` default) is placed by the
rank its trace header records (``distributedInfo``); a trace that records
none either (one GPU, ROCm, a user's own ``torch.profiler`` run) is rank 0 of
its folder, or, where a folder holds several such traces, they are numbered
in the order of their names; ``Plan.assumed`` says which, for the reader.

Files that match no form, or that would put two files of one rank into one
merge, are reported as unplaced with the reason, never guessed. A rank the
step should have and the folder lacks (the manifest's ``expected_ranks``, or
the traces' ``distributedInfo.world_size``) is named in ``MergeGroup.missing``,
with where it lives when the manifest knows (a server spanning nodes).
"""

from __future__ import annotations

import os
from pathlib import Path

from . import manifest
from .layout import FLIGHT_DIR, MERGED
from ..trace.format import naming
from ..trace.format.naming import ASCEND_SUFFIX, ASCEND_TRACE_VIEW, is_trace, trace_view_of
from ..trace.format.rank_files import MergeGroup, Plan, RankFile, Unplaced, positions_from_rank

TRACE_SUFFIXES = (".trace.json", ".trace.json.gz")
NOT_ANALYSED = ("torch_npu data not analysed yet (no ASCEND_PROFILER_OUTPUT/trace_view.json): "
                "run `rlprof npu-analyse {dir}` where torch_npu is installed, then merge again")


def plan(directory: str | Path) -> Plan:
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: not a directory")
    data = manifest.read(directory)
    if data is not None and data.get("files"):
        return _from_manifest(directory, data)
    return _from_names(directory)


def _from_manifest(directory: Path, data: dict) -> Plan:
    groups: dict[str | None, list[RankFile]] = {}
    unplaced: list[Unplaced] = []
    parallel = data.get("parallel")
    hosts = {name: (w.get("process") or {}).get("host") for name, w in data.get("writers", {}).items()}
    for f in data["files"]:
        path = directory / f["path"]
        npu = f.get("kind") == "npu_profile"
        if npu:
            if not trace_view_of(path).exists():
                unplaced.append(Unplaced(path, NOT_ANALYSED.format(dir=directory)))
                continue
            path = trace_view_of(path)
        elif f.get("kind", "trace") != "trace" or not is_trace(path):
            continue
        if not path.exists():
            unplaced.append(Unplaced(path, "listed in manifest.json but missing"))
            continue
        role = f.get("role", "worker")
        label = str(f.get("rank") or "")
        number, position = naming.parse_rank_label(label) or (None, {})
        if number is not None:
            position = positions_from_rank(number, parallel)
        order = naming.rank_order(number, position) if position or number is not None else (0, 1 << 30)
        rf = RankFile(
            path=path,
            label="frontend" if role == "frontend" else label,
            role=role,
            order=(1, 0, path.name) if role == "frontend" else (*order, label),
            position=position,
            absolute_time=npu,
            host=hosts.get("frontend" if role == "frontend" else label),
        )
        stage = f.get("stage")
        groups.setdefault(None if stage in (None, "all") else stage, []).append(rf)
    if any(stage is not None for stage in groups) and None in groups:
        # A by-stage session: the API server's trace is not split by stage.
        for rf in groups.pop(None):
            unplaced.append(Unplaced(rf.path, f"{rf.label} trace of a by-stage session (not split by stage)", rf.role))
    out = [_group(directory, stage, files, unplaced) for stage, files in sorted(groups.items(), key=_stage_key)]
    where = {r.get("rank"): r for r in data.get("roster") or []}
    for g in out:
        g.missing = _missing(g, int(data.get("expected_ranks") or 0), where)
    return Plan(out, unplaced)


def _missing(group: MergeGroup, expected: int, where: dict[str, dict] | None = None) -> list[str]:
    """The ranks ``group`` lacks of ``expected``, each with where it was written when known."""
    labels = [rf.label for rf in group.inputs if rf.role == "worker"]
    if not expected or len(labels) >= expected:
        return []
    names = naming.expected_labels(labels, expected)
    if names is None:
        return [_counted(labels, expected)]
    out = []
    for name in (n for n in names if n not in labels):
        r = (where or {}).get(name)
        out.append(f"{name} (node {r.get('node')}, host {r.get('host')}, {r.get('directory')})" if r else name)
    return out


def _counted(labels: list[str], expected: int) -> str:
    """What ``_missing`` says where the lacking ranks' names are not known: how many, of how many."""
    return f"{expected - len(labels)} of {expected} ranks (have {', '.join(labels) or 'none'})"


def missing_joined(labels: list[str], parts: list[str]) -> list[str]:
    """What ``_missing`` says of a merge group joined from several folders' groups (a step whose ranks lie on
    several nodes): ``labels`` the joined group's worker ranks, ``parts`` what ``_missing`` said of each part,
    one list after another. A rank named as lacking stays so, with where it lives, unless the join holds it;
    a count (the names not known) is counted again over the joined ranks."""
    out, seen = [], set()
    for said in parts:
        first, _, rest = said.partition(" of ")
        if first.isdigit() and rest:
            expected = int(rest.split(" ", 1)[0])
            said = _counted(labels, expected) if expected > len(labels) else None
            key = said
        else:
            key = said.split(" ", 1)[0]
            said = None if key in labels else said
        if said is not None and key not in seen:
            seen.add(key)
            out.append(said)
    return out


def _stage_key(item) -> tuple:
    return (item[0] is not None, item[0] or "")


def _group(directory: Path, stage: str | None, files: list[RankFile], unplaced: list[Unplaced], group: str = "") -> MergeGroup:
    files.sort(key=lambda f: f.order)
    kept: list[RankFile] = []
    seen: dict[str, RankFile] = {}
    for f in files:
        if f.label in seen:
            unplaced.append(Unplaced(f.path, f"a second trace of {f.label} in one merge (also {seen[f.label].path.name}); "
                                             "merge the files you mean explicitly", f.role))
            continue
        seen[f.label] = f
        kept.append(f)
    return MergeGroup(directory, stage, kept, group, merged_dir=directory / MERGED)


# ---- a step folder's trace files: the one walk every reader of a step makes ----------
def trace_files(directory: str | Path) -> list[Path]:
    """The step's trace files at any depth: workers', the API server's, stage files, merged ones,
    and of each torch_npu folder its timeline (``trace_view.json``, once analysed); not hidden
    files (chunks, temporaries). The merge plan and the step report both read a step through it."""
    return _walk(Path(directory))[0]


def _walk(directory: Path) -> tuple[list[Path], list[Path]]:
    """One pass over the step folder: its trace files (``trace_files``) and its torch_npu folders (hidden
    ones skipped: chunks, temporaries, the report's cache). ``os.walk``: a fleet's report walks hundreds
    of step folders on every run, and ``Path.rglob`` costs several times as much."""
    files, npu = [], []
    base = len(str(directory))
    for top, dirs, names in os.walk(directory):
        # not hidden ones, nor the step's flight recorder dumps (their windows, not the session's traces)
        dirs[:] = [d for d in dirs if not d.startswith(".") and not (d == FLIGHT_DIR and len(top) == base)]
        inside_npu = any(part.endswith(ASCEND_SUFFIX) for part in top[base:].split(os.sep))
        npu += [os.path.join(top, d) for d in dirs if d.endswith(ASCEND_SUFFIX)]
        for name in names:
            if name.startswith("."):
                continue
            if inside_npu:
                if name == ASCEND_TRACE_VIEW:
                    files.append(os.path.join(top, name))
            elif name.endswith(TRACE_SUFFIXES):
                files.append(os.path.join(top, name))
    return sorted(map(Path, files)), sorted(map(Path, npu))


def _from_names(directory: Path) -> Plan:
    groups: dict[tuple[str, str | None], list[RankFile]] = {}
    unplaced: list[Unplaced] = []
    rankless: dict[tuple[str, str | None], list[tuple[Path, naming.TraceName]]] = {}
    files, npu_folders = _walk(directory)
    for path in files:
        parts = path.relative_to(directory).parts
        if path.name == ASCEND_TRACE_VIEW or MERGED in parts[:-1] or not is_trace(path):
            continue  # torch_npu timelines below; merged traces are outputs, not ranks
        name = naming.parse(path.name)
        rf, key = _recognise(path, name)
        if rf is None and name is not None and name.role == "worker" and name.rank is None and not name.position:
            rankless.setdefault((name.group, name.stage), []).append((path, name))
            continue
        if rf is None:
            unplaced.append(Unplaced(path, "file name matches no rank naming of vLLM, SGLang, torch_npu or rlprof"))
            continue
        groups.setdefault(key, []).append(rf)
    assumed = _number_rankless(rankless, groups)
    for folder in npu_folders:
        rf, key = _recognise(trace_view_of(folder), naming.parse_ascend_folder(folder.name), absolute_time=True)
        if rf is None:
            unplaced.append(Unplaced(folder, "torch_npu directory whose worker name is no rank name rlprof knows"))
        elif not rf.path.exists():
            unplaced.append(Unplaced(folder, NOT_ANALYSED.format(dir=directory)))
        else:
            groups.setdefault(key, []).append(rf)
    out = [_group(directory, stage, files, unplaced, group) for (group, stage), files in
           sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] is not None, kv[0][1] or ""))]
    for g in out:  # no manifest: the world size the traces recorded
        sizes = [naming.trace_world_size(rf.path) for rf in g.inputs if rf.role == "worker" and not rf.absolute_time]
        g.missing = _missing(g, max((n for n in sizes if n), default=0))
    if len({g for g, _ in groups}) <= 1:
        for g in out:
            g.group = ""
    return Plan(out, unplaced, assumed)


def _number_rankless(rankless: dict[tuple[str, str | None], list[tuple[Path, naming.TraceName]]],
                     groups: dict[tuple[str, str | None], list[RankFile]]) -> list[str]:
    """Traces whose name and header record no rank: the lowest ranks their group leaves free, in the
    order of their names (one such trace alone: rank 0). Returns what was assumed, file by file."""
    assumed = []
    for key, found in sorted(rankless.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        taken = {rf.label for rf in groups.get(key, [])}
        how = "the only such trace" if len(found) == 1 else f"numbered by file name, {len(found)} such traces"
        rank = 0
        for path, name in sorted(found, key=lambda pn: str(pn[0])):
            while naming.rank_label(rank) in taken:
                rank += 1
            taken.add(naming.rank_label(rank))
            rf = RankFile(path, naming.rank_label(rank), "worker", naming.rank_order(rank, {}))
            groups.setdefault(key, []).append(rf)
            assumed.append(f"{naming.rank_label(rank)}: {path.name} (no rank in its name or its trace: {how})")
            rank += 1
    return assumed


def _recognise(path: Path, name: naming.TraceName | None, absolute_time: bool = False
               ) -> tuple[RankFile | None, tuple[str, str | None]]:
    if name is None or name.role == "merged":
        return None, ("", None)
    if name.role == "worker" and name.rank is None and not name.position:
        rank = naming.trace_rank(path)  # vLLM's env era: only the trace knows its rank
        if rank is None:
            return None, ("", None)
        name = naming.TraceName("worker", name.group, name.stage, rank, {}, name.form)
    rf = RankFile(path, name.label, name.role, name.order, absolute_time=absolute_time, position=dict(name.position))
    return rf, (name.group, name.stage)


# ---- a step folder's merges ------------------------------------------------------------
def merge_folder(directory: str | Path) -> list[str]:
    """Every merge a step folder plans (one per stage), writers whose process is gone marked failed first."""
    from .reaping import reap_all
    from ..trace.rewrite.merge import merge

    reap_all(Path(directory))
    groups = [g for g in plan(Path(directory)).groups if g.inputs]
    if not groups:
        raise FileNotFoundError(f"{directory}: no rank traces found to merge")
    return [str(merge(g, g.output, progress=None).output) for g in groups]


def merge_in_subprocess(directory: Path, timeout: float | None = None) -> list[Path]:
    """``merge_folder`` in a child process: the live ``merge`` option's JSON work never holds the engine's GIL."""
    from .._child import run_in_child

    return [Path(p) for p in run_in_child(f"{__name__}:merge_folder", directory, what="merge", timeout=timeout)]
