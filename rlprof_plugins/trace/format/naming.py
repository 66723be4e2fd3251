"""Every trace name the engines and rlprof write, read and written in one place.

Readers (``rlprof merge``, ``split-stages``, ``summary``, the step-folder
layout) and writers (the engine patches, the merge) agree on names through
this module only. The forms, per writer and release era:

- vLLM workers, rlprof and native >= 0.17: ``[prefix_]<suffix>.<ns>[.<stage>].pt.trace.json[.gz]``,
  the suffix ``dp<D>_pp<P>_tp<T>_dcp<C>_ep<E>_rank<R>`` (``get_worker_rank_suffix``)
  or ``rank<R>`` (rlprof on releases without it);
- vLLM workers, native 0.12-0.16: ``<instance_id>-rank-<R>.<ns>.pt.trace.json.gz``;
- vLLM workers, native env era (< 0.12): torch's default ``<host>_<pid>.<ns>.pt.trace.json.gz``
  (no rank in the name: the rank is the trace's own ``distributedInfo.rank``);
- vLLM's API server: ``[prefix_]<host>_<pid>.async_llm.<ns>[.<stage>].pt.trace.json[.gz]``;
- SGLang native: ``[prefix-]<profile_id>-TP-<t>[-DP-<d>][-PP-<p>][-EP-<e>][-EXTEND|-DECODE].trace.json.gz``;
- rlprof on SGLang: ``[prefix-]TP-<t>[-DP-<d>][-PP-<p>][-EP-<e>].<ns>[.<stage>].pt.trace.json.gz``;
- torch_npu: a folder ``<worker>_<pid>_<17 digits>_ascend_pt`` per rank, named after one of the
  worker names above;
- rlprof's merge: ``merged[.<group>][.<stage>].pt.trace.json.gz``.

The device-event categories (what ran on the accelerator) are declared here
too, for every tool that tells host from device.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

TRACE_SUFFIX = ".pt.trace.json"
MERGED_NAME = "merged"
ASCEND_SUFFIX = "_ascend_pt"
# Inside a torch_npu folder: where its analysis puts the Chrome-format timeline.
ASCEND_OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
ASCEND_TRACE_VIEW = "trace_view.json"
STAGES = ("prefill", "decode")
# Kineto's categories of events on a device timeline (CUDA, ROCm, XPU and
# torch_npu's Kineto-style export); the work among them (what a device-time
# ranking counts: annotations only span work); words in a process or thread
# name that mark a device timeline.
DEVICE_WORK_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
DEVICE_CATS = DEVICE_WORK_CATS | {"gpu_user_annotation", "cuda_driver_kernel"}
DEVICE_WORDS = ("GPU", "NPU", "XPU", "HPU", "Device", "Ascend")
# Kineto's categories before its trace activities were renamed (pytorch/kineto 6f9c0eef, "Refactor trace
# activities", gave them the ActivityType names above): torch 1.8 and 1.9 wrote these, and their traces are still handed around
KINETO_2021_CATS = {"Operator": "cpu_op", "User": "user_annotation", "Runtime": "cuda_runtime", "Kernel": "kernel",
                    "Memcpy": "gpu_memcpy", "Memset": "gpu_memset"}


def category(cat: object) -> object:
    """An event's category by today's name (an older Kineto's read as today's; anything else as it is)."""
    return KINETO_2021_CATS.get(cat, cat) if cat.__class__ is str else cat


def trace_view_of(profile_dir: Path) -> Path:
    """Where torch_npu's analysis puts the Chrome-format timeline of one ``*_ascend_pt`` folder."""
    return profile_dir / ASCEND_OUTPUT_DIR / ASCEND_TRACE_VIEW


def is_device_event(event: dict) -> bool:
    """A complete event on a device timeline (a kernel, copy, memset, device annotation)."""
    cat = str(category(event.get("cat")) or "").lower()
    return event.get("ph") == "X" and (cat in DEVICE_CATS or cat.startswith("gpu_"))


@dataclass(frozen=True)
class TraceName:
    """What a trace file's name says."""

    role: str  # "worker", "frontend" or "merged"
    group: str = ""  # vLLM prefix / instance id, SGLang prefix and profile id: one session's files
    stage: str | None = None  # "prefill", "decode" or None
    rank: int | None = None  # vLLM's global rank, when the name has it
    position: dict[str, int] = field(default_factory=dict)  # tp/pp/dp/ep where known
    form: str = ""  # which writer's naming (for messages and tests)

    @property
    def label(self) -> str:
        """This rank's name (``rank_label``), or the role: ``rank1``, ``TP-1-PP-0``, ``frontend``."""
        return rank_label(self.rank, self.position) if self.role == "worker" else self.role

    @property
    def order(self) -> tuple:
        """Workers by rank (tp fastest, then pp, then dp), the API server after them."""
        return rank_order(self.rank, self.position) if self.role == "worker" else (1, 0)


# ---- a rank's name ----------------------------------------------------------------
_POSITION_KEYS = ("tp", "dp", "pp", "ep")  # SGLang's order in its file names
_RANK_LABEL = re.compile(r"^(?:dp(?P<vllm_dp>\d+)-)?rank(?P<rank>\d+)$"
                         r"|^TP-(?P<tp>\d+)(?:-DP-(?P<dp>\d+))?(?:-PP-(?P<pp>\d+))?(?:-EP-(?P<ep>\d+))?$")


def rank_label(rank: int | None = None, position: dict[str, int] | None = None) -> str:
    """The name rlprof gives a rank, the same in manifests (the writer and its
    files), step logs, flight dumps, metrics labels, status answers, merged
    traces and summaries, and close to the engine's own trace names. vLLM: ``rank<R>``, the rank within
    its engine that its own trace names end with, and ``dp<D>-rank<R>`` for
    the engines of data-parallel ranks above 0 (each engine numbers its
    workers from 0, so the data-parallel rank tells them apart; rank 0 keeps
    the name a server without data parallelism gives); SGLang:
    ``TP-<t>[-DP-<d>][-PP-<p>][-EP-<e>]``, its trace names' rank part."""
    pos = position or {}
    if rank is not None:
        return f"dp{pos['dp']}-rank{rank}" if pos.get("dp") else f"rank{rank}"
    return "-".join(f"{k.upper()}-{pos[k]}" for k in _POSITION_KEYS if k in pos)


def parse_rank_label(label: str) -> tuple[int | None, dict[str, int]] | None:
    """``(rank, position)`` back from a ``rank_label``; None for another name."""
    m = _RANK_LABEL.match(label)
    if m is None:
        return None
    rank = m.group("rank")
    if rank is not None:
        return int(rank), ({"dp": int(m.group("vllm_dp"))} if m.group("vllm_dp") is not None else {})
    return None, {k: int(m.group(k)) for k in _POSITION_KEYS if m.group(k) is not None}


def rank_order(rank: int | None, position: dict[str, int]) -> tuple:
    """Ranks in merge order: tp fastest, then pp, then dp (vLLM's global ranks count so; each data-parallel
    engine's ranks after the one before)."""
    if rank is not None:
        return (0, position.get("dp", 0), rank)
    p = position
    return (0, p.get("dp", 0), p.get("pp", 0), p.get("tp", 0), p.get("ep", 0))


_END = r"\.(?P<ns>\d+)(?:\.(?P<stage>prefill|decode))?\.pt\.trace\.json(?:\.gz)?$"
_VLLM_SUFFIX = (r"(?:dp(?P<dp>\d+)_pp(?P<pp>\d+)_tp(?P<tp>\d+)(?:_dcp(?P<dcp>\d+))?(?:_ep(?P<ep>\d+))?_)?"
                r"rank(?P<rank>\d+)")
_HOST = r"[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*"  # a host name (socket.gethostname())
# ``(?:...)??``: try without a prefix first, so a suffix is never read as a prefix
_FORMS: tuple[tuple[str, re.Pattern], ...] = (
    ("merged", re.compile(r"^merged(?:\.(?P<group>[^.]+))??(?:\.(?P<stage>prefill|decode))?\.pt\.trace\.json(?:\.gz)?$")),
    ("vllm-frontend", re.compile(r"^(?:(?P<group>.+)_)?(?P<host>" + _HOST + r")_(?P<pid>\d+)\.async_llm" + _END)),
    ("vllm", re.compile(r"^(?:(?P<group>.+?)_)??" + _VLLM_SUFFIX + _END)),
    ("vllm-instance", re.compile(r"^(?P<group>.+)-rank-(?P<rank>\d+)" + _END)),
    ("rlprof-sglang", re.compile(r"^(?:(?P<group>.+?)-)??TP-(?P<tp>\d+)(?:-DP-(?P<dp>\d+))?(?:-PP-(?P<pp>\d+))?"
                                 r"(?:-EP-(?P<ep>\d+))?" + _END)),
    ("sglang", re.compile(r"^(?P<group>.+?)-TP-(?P<tp>\d+)(?:-DP-(?P<dp>\d+))?(?:-PP-(?P<pp>\d+))?"
                          r"(?:-EP-(?P<ep>\d+))?(?:-(?P<stage>EXTEND|DECODE))?\.trace\.json(?:\.gz)?$")),
    ("torch-default", re.compile(r"^(?P<host>" + _HOST + r")_(?P<pid>\d+)" + _END)),
)
_SGLANG_STAGES = {"EXTEND": "prefill", "DECODE": "decode"}
_ASCEND = re.compile(r"^(?P<worker>.+)_(?P<pid>\d+)_(?P<time>\d{17})" + re.escape(ASCEND_SUFFIX) + "$")


def parse(name: str) -> TraceName | None:
    """What a trace file name says, or None for a name no writer produces."""
    for form, pattern in _FORMS:
        m = pattern.match(name)
        if m is None:
            continue
        groups = m.groupdict()
        stage = groups.get("stage")
        stage = _SGLANG_STAGES.get(stage, stage)
        position = {k: int(groups[k]) for k in ("tp", "pp", "dp", "ep") if groups.get(k) is not None}
        rank = int(groups["rank"]) if groups.get("rank") is not None else None
        role = {"merged": "merged", "vllm-frontend": "frontend"}.get(form, "worker")
        if form == "torch-default":  # vLLM's env era: the host and pid say which process, not which rank
            return TraceName(role, "", stage, None, {}, form)
        return TraceName(role, groups.get("group") or "", stage, rank, position, form)
    return None


def parse_ascend_folder(name: str) -> TraceName | None:
    """A torch_npu ``*_ascend_pt`` folder, through the worker name it was recorded under."""
    m = _ASCEND.match(name)
    if m is None:
        return None
    return parse(f"{m.group('worker')}.0{TRACE_SUFFIX}")


def is_trace(path: Path) -> bool:
    """A rank's trace file (not a merged one, not a hidden temporary)."""
    name = path.name
    return (name.endswith(".trace.json.gz") or name.endswith(".trace.json")) and not name.startswith(
        (".", MERGED_NAME + ".", MERGED_NAME + "-"))


def trace_distributed(path: Path, limit: int = 1 << 16) -> dict:
    """A Kineto trace's ``distributedInfo`` (rank, world_size, ...; {} when it has none),
    from the first ``limit`` bytes: Kineto writes that header before the events."""
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rt", errors="replace") as f:
            head = f.read(limit)
    except (OSError, EOFError):
        return {}
    at = head.find('"distributedInfo"')
    brace = head.find("{", at) if at >= 0 else -1
    if brace < 0:
        return {}
    try:
        info, _ = json.JSONDecoder().raw_decode(head, brace)  # nested (pg_config) as Kineto writes it
    except ValueError:
        return {}
    return info if isinstance(info, dict) else {}


def _integer(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def trace_rank(path: Path, limit: int = 1 << 16) -> int | None:
    """The rank a Kineto trace says it recorded (``distributedInfo.rank``)."""
    return _integer(trace_distributed(path, limit).get("rank"))


def trace_world_size(path: Path, limit: int = 1 << 16) -> int | None:
    """How many ranks the trace's process group had (``distributedInfo.world_size``)."""
    return _integer(trace_distributed(path, limit).get("world_size"))


def expected_labels(labels: list[str], expected: int) -> list[str] | None:
    """Every rank's name of a step with ``expected`` ranks, in the form ``labels``
    use (vLLM ``rank<R>``, SGLang ``TP-<t>`` with TP alone); None where the form
    does not say (SGLang with pp/dp: only the count is known)."""
    parsed = [parse_rank_label(label) for label in labels]
    if parsed and all(p is not None and p[0] is not None for p in parsed):
        return [rank_label(r) for r in range(expected)]
    if parsed and all(p is not None and p[0] is None and set(p[1]) == {"tp"} for p in parsed):
        return [rank_label(position={"tp": t}) for t in range(expected)]
    return None


# ---- the names rlprof writes ------------------------------------------------
def vllm_rank_suffix(rank: int, dp: int, tp_size: int) -> str:
    """A vLLM worker's trace name suffix in vLLM's own form (``dp1_pp0_tp0_rank0``), for a data-parallel
    engine's worker where vLLM's own suffix does not say its data-parallel rank."""
    return f"dp{dp}_pp{rank // max(tp_size, 1)}_tp{rank % max(tp_size, 1)}_rank{rank}"


def vllm_worker_name(prefix: str | None, suffix: str) -> str:
    """A vLLM worker's trace name: vLLM's own (``<prefix>_<suffix>``)."""
    return f"{prefix}_{suffix}" if prefix else suffix


def vllm_frontend_name(host: str, pid: int) -> str:
    """vLLM's API-server trace name (``AsyncLLM``'s own profiler names it so)."""
    return f"{host}_{pid}.async_llm"


def sglang_rank_label(pos: dict[str, int]) -> str:
    """An SGLang scheduler's ``rank_label`` from its place and the sizes
    (``TP-1``, ``TP-0-PP-1``): dimensions of size above one only, as its native file names."""
    return rank_label(position={k: pos[k] for k in _POSITION_KEYS if k == "tp" or pos[f"{k}_size"] > 1})


def sglang_worker_name(prefix: str | None, label: str) -> str:
    return f"{prefix}-{label}" if prefix else label


def trace_file(worker_name: str, ns: int, stage: str | None = None, gzip: bool = True) -> str:
    """``<worker>.<ns>[.<stage>].pt.trace.json[.gz]``: torch's handler naming, with rlprof's stage."""
    return f"{worker_name}.{ns}{'.' + stage if stage else ''}{TRACE_SUFFIX}{'.gz' if gzip else ''}"


def merged_file(group: str = "", stage: str | None = None) -> str:
    return ".".join([MERGED_NAME] + ([group] if group else []) + ([stage] if stage else [])) + TRACE_SUFFIX + ".gz"
