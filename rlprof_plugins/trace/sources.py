"""Which trace files of a step folder belong together, and whose they are.

With a manifest (written by the plugin) every file's rank, stage and role
are read from it. Without one (a folder written by a native engine) the
engines' own naming is recognised:

- vLLM: ``[prefix_]<rank suffix>.<ns>.pt.trace.json[.gz]`` where the suffix
  is ``rank<R>`` or ``dp<D>_pp<P>_tp<T>[_dcp<C>][_ep<E>]_rank<R>``, and the
  API server's ``<host>_<pid>.async_llm.<ns>.pt.trace.json[.gz]``; rlprof's
  by-stage files add ``.prefill``/``.decode`` before ``.pt.trace``.
- SGLang: ``[prefix-]<profile_id>-TP-<t>[-DP-<d>][-PP-<p>][-EP-<e>][-EXTEND|-DECODE].trace.json.gz``,
  and rlprof's SGLang files ``[prefix-]TP-<t>[-DP-<d>][-PP-<p>][-EP-<e>].<ns>[.prefill|.decode].pt.trace.json.gz``.

- torch_npu (Ascend): a directory ``<worker>_<pid>_<time>_ascend_pt`` per
  rank, where ``<worker>`` is one of the rank names above; its analysed
  timeline ``ASCEND_PROFILER_OUTPUT/trace_view.json`` is the rank's trace.
  A directory not analysed yet is reported with the command to run first.

Files that match neither, or that would put two files of one rank into one
merge, are reported as unplaced with the reason, never guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from .. import manifest
from ..backends.npu_profiler import ASCEND_SUFFIX, trace_view_of

MERGED_NAME = "merged"

_VLLM_RANK = re.compile(
    r"^(?:(?P<prefix>.+)_)?(?:dp(?P<dp>\d+)_pp(?P<pp>\d+)_tp(?P<tp>\d+)(?:_dcp\d+)?(?:_ep(?P<ep>\d+))?_)?"
    r"rank(?P<rank>\d+)\.(?P<ns>\d+)(?:\.(?P<stage>prefill|decode))?\.pt\.trace\.json(?:\.gz)?$"
)
_VLLM_FRONTEND = re.compile(
    r"^(?:(?P<prefix>.+)_)?(?P<host>[^.]+)_(?P<pid>\d+)\.async_llm\.(?P<ns>\d+)(?:\.(?P<stage>prefill|decode))?"
    r"\.pt\.trace\.json(?:\.gz)?$"
)
_SGLANG = re.compile(
    r"^(?P<group>.+?)-TP-(?P<tp>\d+)(?:-DP-(?P<dp>\d+))?(?:-PP-(?P<pp>\d+))?(?:-EP-(?P<ep>\d+))?"
    r"(?:-(?P<stage>EXTEND|DECODE))?\.trace\.json(?:\.gz)?$"
)
_ASCEND = re.compile(r"^(?P<worker>.+)_(?P<pid>\d+)_(?P<time>\d{17})" + re.escape(ASCEND_SUFFIX) + "$")
NOT_ANALYSED = ("torch_npu data not analysed yet (no ASCEND_PROFILER_OUTPUT/trace_view.json): "
                "run `rlprof npu-analyse {dir}` where torch_npu is installed, then merge again")
_SGLANG_STAGES = {"EXTEND": "prefill", "DECODE": "decode", "prefill": "prefill", "decode": "decode"}
_RLPROF_SGLANG = re.compile(
    r"^(?:(?P<group>.+?)-)?TP-(?P<tp>\d+)(?:-DP-(?P<dp>\d+))?(?:-PP-(?P<pp>\d+))?(?:-EP-(?P<ep>\d+))?"
    r"\.(?P<ns>\d+)(?:\.(?P<stage>prefill|decode))?\.pt\.trace\.json(?:\.gz)?$"
)


@dataclass
class RankFile:
    """One input of a merge."""

    path: Path
    label: str  # "rank1", "TP1-PP0", "frontend"
    role: str = "worker"  # or "frontend"
    order: tuple = ()
    # torch_npu's trace_view.json: an event array whose ``ts`` are absolute
    # (epoch) microseconds, as strings; Kineto traces count from a base time.
    absolute_time: bool = False
    position: dict[str, int] = field(default_factory=dict)  # tp/pp/dp/ep where known

    def describe(self) -> str:
        pos = " ".join(f"{k}{v}" for k, v in self.position.items())
        return f"{self.label} ({pos})" if pos and not self.label.startswith(pos) else self.label


@dataclass
class MergeGroup:
    """The files that become one merged trace (one per stage in by-stage sessions)."""

    directory: Path
    stage: str | None
    inputs: list[RankFile]
    group: str = ""  # SGLang profile id / vLLM prefix, when several sessions share a folder

    @property
    def output(self) -> Path:
        parts = [MERGED_NAME] + ([self.group] if self.group else []) + ([self.stage] if self.stage else [])
        return self.directory / (".".join(parts) + ".pt.trace.json.gz")


@dataclass
class Plan:
    groups: list[MergeGroup]
    unplaced: list[tuple[Path, str]]


def is_trace(path: Path) -> bool:
    name = path.name
    return (name.endswith(".trace.json.gz") or name.endswith(".trace.json")) and not name.startswith(
        (".", MERGED_NAME + ".", MERGED_NAME + "-")
    )


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
    unplaced = []
    parallel = data.get("parallel")
    for f in data["files"]:
        path = directory / f["path"]
        npu = f.get("kind") == "npu_profile"
        if npu:
            if not trace_view_of(path).exists():
                unplaced.append((path, NOT_ANALYSED.format(dir=directory)))
                continue
            path = trace_view_of(path)
        elif f.get("kind", "trace") != "trace" or not is_trace(path):
            continue
        if not path.exists():
            unplaced.append((path, "listed in manifest.json but missing"))
            continue
        role = f.get("role", "worker")
        rank = str(f.get("rank") or "")
        m = re.search(r"rank(\d+)$", rank)
        number = int(m.group(1)) if m else None
        rf = RankFile(
            path=path,
            label="frontend" if role == "frontend" else rank,
            role=role,
            order=(1, 0, path.name) if role == "frontend" else (0, number if number is not None else 1 << 30, rank),
            position=positions_from_rank(number, parallel) if number is not None else {},
            absolute_time=npu,
        )
        stage = f.get("stage")
        groups.setdefault(None if stage in (None, "all") else stage, []).append(rf)
    if any(stage is not None for stage in groups) and None in groups:
        # A by-stage session: the API server's trace is not split by stage.
        for rf in groups.pop(None):
            unplaced.append((rf.path, f"{rf.label} trace of a by-stage session (not split by stage)"))
    return Plan([_group(directory, stage, files, unplaced) for stage, files in sorted(groups.items(), key=_stage_key)],
                unplaced)


def _stage_key(item) -> tuple:
    return (item[0] is not None, item[0] or "")


def _group(directory: Path, stage: str | None, files: list[RankFile], unplaced: list, group: str = "") -> MergeGroup:
    files.sort(key=lambda f: f.order)
    kept: list[RankFile] = []
    seen: dict[str, RankFile] = {}
    for f in files:
        if f.label in seen:
            unplaced.append((f.path, f"a second trace of {f.label} in one merge (also {seen[f.label].path.name}); "
                                     "merge the files you mean explicitly"))
            continue
        seen[f.label] = f
        kept.append(f)
    return MergeGroup(directory, stage, kept, group)


def _from_names(directory: Path) -> Plan:
    groups: dict[tuple[str, str | None], list[RankFile]] = {}
    unplaced: list[tuple[Path, str]] = []
    for path in sorted(p for p in directory.iterdir() if p.is_file() and is_trace(p)):
        rf, key = _recognise(path)
        if rf is None:
            unplaced.append((path, "file name matches neither vLLM's nor SGLang's rank naming"))
            continue
        groups.setdefault(key, []).append(rf)
    for path in sorted(p for p in directory.iterdir() if p.is_dir() and _ASCEND.match(p.name)):
        rf, key = _recognise_ascend(path)
        if rf is None:
            unplaced.append((path, "torch_npu directory whose worker name is neither vLLM's nor SGLang's rank name"))
        elif not rf.path.exists():
            unplaced.append((path, NOT_ANALYSED.format(dir=directory)))
        else:
            groups.setdefault(key, []).append(rf)
    out = [_group(directory, stage, files, unplaced, group) for (group, stage), files in
           sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] is not None, kv[0][1] or ""))]
    if len({g for g, _ in groups}) <= 1:
        for g in out:
            g.group = ""
    return Plan(out, unplaced)


def _recognise(path: Path) -> tuple[RankFile | None, tuple[str, str | None]]:
    name = path.name
    m = _VLLM_RANK.match(name)
    if m:
        rank = int(m.group("rank"))
        pos = {k: int(m.group(k)) for k in ("tp", "pp", "dp", "ep") if m.group(k) is not None}
        rf = RankFile(path, f"rank{rank}", "worker", (0, rank), pos)
        return rf, (m.group("prefix") or "", m.group("stage"))
    m = _VLLM_FRONTEND.match(name)
    if m:
        return RankFile(path, "frontend", "frontend", (1, 0)), (m.group("prefix") or "", m.group("stage"))
    m = _SGLANG.match(name) or _RLPROF_SGLANG.match(name)
    if m:
        pos = {k: int(m.group(k)) for k in ("tp", "pp", "dp", "ep") if m.group(k) is not None}
        label = "-".join(f"{k.upper()}{pos[k]}" for k in ("dp", "pp", "tp", "ep") if k in pos)
        order = (0, pos.get("dp", 0), pos.get("pp", 0), pos.get("tp", 0), pos.get("ep", 0))
        stage = _SGLANG_STAGES.get(m.group("stage") or "")
        return RankFile(path, label, "worker", order, pos), (m.group("group") or "", stage)
    return None, ("", None)


def _recognise_ascend(path: Path) -> tuple[RankFile | None, tuple[str, str | None]]:
    """A torch_npu directory, through the rank name it was recorded under."""
    worker = _ASCEND.match(path.name).group("worker")
    rf, key = _recognise(Path(f"{worker}.0.pt.trace.json"))  # as rlprof names that rank's torch traces
    if rf is None:
        return None, ("", None)
    rf.path, rf.absolute_time = trace_view_of(path), True
    return rf, key
