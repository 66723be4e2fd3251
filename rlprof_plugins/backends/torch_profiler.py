"""The torch.profiler backend (CPU, CUDA, XPU activities).

Writes the same files as vLLM's native ``TorchProfilerWrapper`` (a Chrome
trace named like ``tensorboard_trace_handler`` does, and the
``profiler_out.txt`` operator table), but each through a temporary name and
an atomic rename, so no half-written trace ever appears under a final name.

One path on every device: ``stop`` runs torch's own stop on the thread that
recorded (the engine's), then Kineto's writer saves the raw trace to a hidden
file beside the rank's traces and the recording is freed, all in the same
pause. Both hold the GIL for as long as they run, so they belong where the
engine has no work; the session decides when that is (``session.chunk_plan``).
``export`` then only copies bytes (the pauses added, gzip) on the exporter
thread, and splits by stage in a child process.
"""

from __future__ import annotations

import gzip
import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from .._log import logger, warn_once
from ..store.layout import Placement
from ..atomic_files import atomic_target, publish, write_text_atomic
from ..trace.format.naming import trace_file
from ..trace.format.pauses import Pause, with_pauses
from ..trace.format.sampler_account import SAMPLER_KEY
from . import stack_sampler
from ..trace.rewrite.stage_split import split_in_subprocess
from . import ExportedFile, RecordingKept
from .kind import BackendKind


# vLLM's torch profiler keys and their defaults (vLLM 0.32's): the one table
# that rlprof's own configuration (SGLang, vLLM before 0.13) and the settings
# read from any release's config fall back on.
NATIVE_DEFAULTS = {
    "torch_profiler_with_stack": True,
    "torch_profiler_record_shapes": False,
    "torch_profiler_with_memory": False,
    "torch_profiler_with_flops": False,
    "torch_profiler_use_gzip": True,
}


@dataclass(frozen=True)
class TorchSettings:
    """What to record. Built from the engine's native profiler keys by
    ``settings_from_config`` (``NATIVE_DEFAULTS`` for the keys a config lacks);
    built bare, it records the least (no stacks, shapes or memory)."""

    activities: tuple[str, ...] = ("CPU",)
    record_shapes: bool = False
    with_stack: bool = False
    with_memory: bool = False
    with_flops: bool = False
    with_modules: bool = False
    use_gzip: bool = True
    # torch's operator table (profiler_out.txt). Building it parses every event
    # in Python while holding the GIL, seconds for a large trace, so it is opt-in.
    write_table: bool = False
    table_sort_key: str = "self_cpu_time_total"
    extra_metadata: dict = field(default_factory=dict)
    # Sampled Python stacks (``python_stacks: "sampled"``): the engine thread's stack read this many
    # times a second by ``stack_sampler``, torch's own ``with_stack`` off. None: no sampler.
    sample_hz: int | None = None
    # The share of the engine thread's time the sampler may take (``stack_sampler.COST_BUDGET`` at the default
    # rate); None: the rate as the user asked for it.
    sample_budget: float | None = None

    @property
    def python_stacks(self) -> str:
        """Which Python stacks this session records: ``exact`` (torch's tracer), ``sampled`` or ``off``."""
        return "exact" if self.with_stack else "sampled" if self.sample_hz else "off"


# The torch backend's own keys (flat in the JSON, beside vLLM's native ones; ``registry``).
# ``python_stacks`` null follows the engine's ``torch_profiler_with_stack``.
STACK_MODES = ("sampled", "exact", "off")
KEYS = {"python_stacks": None, "sample_hz": None}  # sample_hz None: the default rate, within the cost budget

# What a configuration that says nothing about stacks records (neither ``python_stacks`` nor
# ``torch_profiler_with_stack`` written): sampled stacks, the same flame view as torch's exact
# stacks at a fraction of their cost (docs/performance.md). A key written keeps its meaning.
DEFAULT_STACKS = "sampled"
STACK_KEYS = ("python_stacks", "torch_profiler_with_stack")


def stacks_unsaid(*configs: Mapping[str, Any]) -> bool:
    """Whether none of ``configs`` (the JSON objects a server was configured with) writes a stack key."""
    return not any(key in config for config in configs for key in STACK_KEYS)


def check_key(key: str, value: Any, error: Any) -> Any:
    """One of the torch backend's keys, checked (``error(key, why)``)."""
    if key == "python_stacks":
        if value is not None and value not in STACK_MODES:
            raise error(key, f"must be one of {', '.join(STACK_MODES)} (or null: as torch_profiler_with_stack), "
                             f"got {value!r}")
        return value
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= stack_sampler.MAX_HZ:
        raise error(key, f"must be an integer from 1 to {stack_sampler.MAX_HZ} (samples a second), got {value!r}")
    return value


def check_against_native(native: Mapping[str, Any], ours: Mapping[str, Any], error: Any) -> None:
    """``python_stacks`` and the engine's ``torch_profiler_with_stack`` both written and saying
    different things: refused at start-up, naming ``python_stacks``."""
    mode, with_stack = ours.get("python_stacks"), native.get("torch_profiler_with_stack")
    if mode is None or with_stack is None:
        return
    if (mode == "exact") != bool(with_stack):
        raise error("python_stacks", f"{mode!r} contradicts torch_profiler_with_stack {str(with_stack).lower()} "
                                     "(exact stacks are torch's with_stack); write one of them")


def with_python_stacks(settings: TorchSettings, keys: Mapping[str, Any],
                       overrides: Mapping[str, Any] | None = None) -> TorchSettings:
    """One session's Python stacks, the first that says: the request's ``python_stacks``; its
    ``with_stack: true`` (exact); the server's ``python_stacks`` (a request's ``with_stack: false``
    turns exact stacks off, not a sampler: it is the cheap kind); the engine's
    ``torch_profiler_with_stack`` (``settings`` as they are)."""
    overrides = overrides or {}
    with_stack = overrides.get("with_stack")
    mode = overrides.get("python_stacks") or ("exact" if with_stack is True else None)
    if mode is None:
        mode = keys.get("python_stacks")
        if with_stack is False and mode != "sampled":
            mode = "off"
    if mode == "sampled":
        hz = overrides.get("sample_hz") or keys.get("sample_hz")  # the request's first; none given: the default
        return replace(settings, with_stack=False, sample_hz=int(hz or stack_sampler.DEFAULT_HZ),
                       sample_budget=None if hz else stack_sampler.COST_BUDGET)
    if mode in ("exact", "off"):
        return replace(settings, with_stack=mode == "exact", sample_hz=None, sample_budget=None)
    return settings


def _build(context: Any, table: bool, overrides: dict) -> "TorchProfilerBackend":
    """A session's backend: the engine's settings with the request's torch overrides, then its stacks."""
    torch_overrides = {k: v for k, v in overrides.items() if k not in ("python_stacks", "sample_hz")}
    settings = context.torch_settings(table, torch_overrides)
    keys = getattr(context.options, "backend_keys", None) or KEYS
    return TorchProfilerBackend(with_python_stacks(settings, keys, overrides))


def settings_from_config(cfg: Any, *, default_activities: tuple[str, ...],
                         overrides: Mapping[str, Any] | None = None, **extra: Any) -> TorchSettings:
    """TorchSettings from any config carrying vLLM's torch profiler keys:
    vLLM's ``ProfilerConfig`` of any release, or rlprof's own (SGLang, and
    vLLM before 0.13). A key a release lacks takes vLLM 0.32's default;
    ``overrides`` (a request's fields) win; ``extra`` sets the rest."""
    overrides = dict(overrides or {})
    activities = tuple(overrides.pop("activities", None) or getattr(cfg, "torch_profiler_activities", None)
                       or default_activities)
    def native(key: str) -> Any:
        return getattr(cfg, key, NATIVE_DEFAULTS[key])

    settings = TorchSettings(
        activities=activities,
        record_shapes=native("torch_profiler_record_shapes"),
        with_stack=native("torch_profiler_with_stack"),
        with_memory=native("torch_profiler_with_memory"),
        with_flops=native("torch_profiler_with_flops"),
        use_gzip=native("torch_profiler_use_gzip"),
        table_sort_key="self_cpu_time_total" if activities == ("CPU",) else "self_device_time_total",
        **extra,
    )
    return replace(settings, **overrides)


_TRACE_ONLY: list = []  # torch's trace-only config, once made (None: this torch has none)
_WARMED: list = []  # once a throwaway profiler session ran in this process (``warm_up``)


def trace_only_config(torch: Any) -> Any:
    """torch's ``_ExperimentalConfig(trace_only=True)`` where this torch has it (2.13 and later), else None.

    torch's stop then makes no event objects beside the trace (they serve ``events()`` and
    ``key_averages()``, which rlprof calls only for the operator table): the stop, paid on the engine
    thread, costs less per recorded operator, and the trace holds the same events, names and args
    (docs/performance.md, "Python stacks"). torch refuses it with
    its exact stacks (``with_stack``: their events are made from those objects), and so does rlprof."""
    if not _TRACE_ONLY:
        try:
            _TRACE_ONLY.append(torch._C._profiler._ExperimentalConfig(trace_only=True))
        except (AttributeError, TypeError):  # an older torch: its stop makes them (as before)
            _TRACE_ONLY.append(None)
    return _TRACE_ONLY[0]


class TorchProfilerBackend:
    # A session may be recorded as several of these in a row (session/chunks.py):
    # torch's stop post-processes on the recording thread, in proportion to what it holds.
    chunkable = True

    def __init__(self, settings: TorchSettings) -> None:
        import torch

        self._torch = torch
        self.settings = settings
        kinds = {
            "CPU": torch.profiler.ProfilerActivity.CPU,
            "CUDA": torch.profiler.ProfilerActivity.CUDA,
            "XPU": torch.profiler.ProfilerActivity.XPU,
            "PrivateUse1": torch.profiler.ProfilerActivity.PrivateUse1,
        }
        self._activities = [kinds[a] for a in settings.activities]
        self._prof = None
        self._sampler = (stack_sampler.StackSampler(settings.sample_hz, settings.sample_budget) if settings.sample_hz
                         else None)
        self._out: Path | None = None  # the folder the raw trace is saved into at the stop (``prepare``)
        self._name = "trace"
        self._raw: Path | None = None  # Kineto's trace as saved at the stop, until the export copies it
        self._save_error: BaseException | None = None  # why the save at the stop failed (the export tries again)

    def warm_up(self) -> None:
        """Pay now what torch's first profiler session in a process pays once: its start reads ``torch._inductor``
        (importing the whole compiler the first time), and its first start and stop set Kineto up for these
        activities (on a GPU, CUPTI). Called at a session's start request where the recording begins later
        (with the engine's first iteration), so that none of it lands inside the recorded work. The throwaway
        session records nothing (no operator runs inside it) and is saved nowhere; it runs once per process."""
        hasattr(self._torch, "_inductor")
        if _WARMED:
            return
        _WARMED.append(True)
        with self._torch.profiler.profile(activities=self._activities):
            pass

    def prepare(self, directory: Path, worker_name: str, scratch: Path | None = None) -> None:
        """Where the stop saves Kineto's raw trace: a hidden file in ``scratch`` (the session's folder), else in
        ``directory`` (the rank's trace folder)."""
        self._out, self._name = Path(scratch or directory), worker_name

    def start(self) -> None:
        s = self.settings
        # no event objects made at the stop where nothing reads them (``trace_only_config``)
        trace_only = None if s.with_stack or s.write_table else trace_only_config(self._torch)
        self._prof = self._torch.profiler.profile(
            activities=self._activities,
            record_shapes=s.record_shapes,
            profile_memory=s.with_memory,
            with_stack=s.with_stack,
            with_flops=s.with_flops,
            with_modules=s.with_modules,
            **({} if trace_only is None else {"experimental_config": trace_only}),
        )
        self._prof.start()
        self._prof.add_metadata_json("rlprof_python_stacks", json.dumps(s.python_stacks))
        for key, value in s.extra_metadata.items():
            self._prof.add_metadata_json(key, value)
        if self._sampler is not None:
            self._sampler.start()
            # which sampler ran, at what rate: a reader knows what a sample stands for (the signal timer
            # samples wherever the engine is; a sampler thread where it releases the GIL)
            self._prof.add_metadata_json(SAMPLER_KEY, json.dumps(self._sampler.description()))
            if self._sampler.why_thread:
                warn_once("stack sampler thread", "rlprof: sampled Python stacks by a sampler thread, not the "
                          "signal timer: %s; samples gather where the engine releases the GIL",
                          self._sampler.why_thread)

    def _stop_sampler(self) -> None:
        """Stop the stack sampler before torch's stop (its thread takes the GIL, which torch's stop holds), and
        write what it sampled and what that cost the engine into the trace while torch still records."""
        if self._sampler is None:
            return
        self._sampler.stop()
        try:
            if self._torch._C._autograd._profiler_enabled():
                self._prof.add_metadata_json(SAMPLER_KEY, json.dumps(self._sampler.description()))
        except Exception as e:  # the start's description stays in the trace; the recording is not at stake
            logger.debug("rlprof: the sampler's cost not written into the trace: %s", e)

    def _ended_elsewhere(self) -> None:
        """torch 2.13's own stop ends the process when the session it stops has already ended (another library
        stopped torch's profiler on this thread: ``disableProfiler`` reads the session it pops before checking
        there is one): rlprof says so instead, and the session fails with that reason."""
        if not self._torch._C._autograd._profiler_enabled():
            raise RuntimeError("the profiler session ended elsewhere before rlprof's stop (torch's profiler was "
                               "stopped on this thread by another caller)")

    def stop(self) -> None:
        """torch's stop, then Kineto's writer saves the raw trace and the recording is freed (see the module's
        docstring). A save that fails leaves the recording in memory: the export tries it again, and says why
        if that fails too."""
        assert self._prof is not None, "stop() before start()"
        self._stop_sampler()
        self._ended_elsewhere()
        self._prof.stop()
        if self._out is None:  # never prepared (a caller of its own): the export saves it
            return
        raw = None
        try:
            raw = atomic_target(self._out / f"{self._name}.raw.json")
            self._prof.export_chrome_trace(str(raw))
        except Exception as e:
            if raw is not None:
                raw.unlink(missing_ok=True)
            self._save_error = e
            logger.warning("rlprof: saving the trace at the stop failed (the export tries again): %s: %s",
                           type(e).__name__, e)
            return
        self._raw = raw
        self._release_saved()

    def discard(self) -> None:
        """A stopped session that will never be exported (a failed one): what it recorded is freed now, not
        kept for the life of the process."""
        self._release_saved()

    def set_iteration(self, index: int | None) -> None:
        """The engine thread entered iteration ``index`` (None: left it): the sampler's spans split there."""
        if self._sampler is not None:
            self._sampler.set_iteration(index)

    def _release_saved(self) -> None:
        """torch keeps a stopped session's recording on its profiler object for as long as that object lives,
        and the process's heap keeps what it frees: once saved (and where no operator table still reads it),
        it is dropped and the freed memory given back: without this, a server recording step after step
        grows by each step's recording."""
        if self.settings.write_table or self._prof is None:
            return
        inner = getattr(self._prof, "profiler", None)
        if inner is not None and getattr(inner, "kineto_results", None) is not None:
            inner.kineto_results = None
        return_freed_memory()

    def annotation(self, name: str):
        return self._torch.profiler.record_function(name)

    def _raw_trace(self, beside: Path) -> Path:
        """Kineto's trace: the file the stop saved, else saved now to a temporary file ``beside`` a path (a stop
        that could not save, or a backend stopped without ``prepare``)."""
        if self._raw is not None:
            return self._raw
        raw = atomic_target(beside)
        try:
            self._prof.export_chrome_trace(str(raw))
        except Exception as e:
            raw.unlink(missing_ok=True)
            if self._save_error is not None:
                raise RuntimeError(f"saving the trace failed at the stop ({type(self._save_error).__name__}: "
                                   f"{self._save_error}) and again at the export ({type(e).__name__}: {e})") from e
            raise
        self._release_saved()
        return raw

    def export(self, place: Placement, worker_name: str, *, by_stage: bool = False,
               pauses: Sequence[Pause] = ()) -> list[ExportedFile]:
        """Write the trace (or one per stage) and, if asked, the table.

        The raw trace the stop saved is copied into place as bytes (no JSON parsing here):
        with the profiler's ``pauses`` as events and Kineto's unescaped
        quotes repaired (``trace.format.pauses``, ``trace.format.repair``), gzip'd when
        asked. Stage splitting parses JSON, so it runs in a child process.
        """
        assert self._prof is not None, "export() before start()"
        s = self.settings
        directory = place.ranks()
        ns = time.time_ns()
        final = directory / trace_file(worker_name, ns, gzip=s.use_gzip)
        written: list[ExportedFile] = []
        # by stage, the whole trace is only the splitter's input: it waits in the
        # step folder, so ranks/ is made only for what lands there
        raw = self._raw
        try:
            raw = self._raw_trace(place.root / final.name if by_stage else final)
            fixed = atomic_target(raw.parent / final.name)
            packed, copied = s.use_gzip and not by_stage, False
            try:
                with (gzip.open(fixed, "wb", compresslevel=6) if packed else open(fixed, "wb")) as dst:
                    more = self._sampler.events if self._sampler is not None else None
                    for piece in with_pauses(raw, list(pauses), more):
                        dst.write(piece)
                copied = True
                if by_stage:
                    for stage, path in split_in_subprocess(fixed, place.stage_template(), f"{worker_name}.{ns}",
                                                           s.use_gzip):
                        written.append(ExportedFile(path, "trace", stage))
                else:
                    directory.mkdir(parents=True, exist_ok=True)
                    publish(fixed, final)
                    written.append(ExportedFile(final))
            except Exception as e:  # the whole trace is on disk: keep it, uncompressed, under its final name
                whole = directory / trace_file(worker_name, ns, gzip=False)
                directory.mkdir(parents=True, exist_ok=True)
                publish(fixed if copied and not packed else raw, whole)  # with its pauses, where written
                finish = (f"rlprof split-stages {whole} -o '{place.stage_template()}'" if by_stage
                          else f"gzip {whole}")
                raise RecordingKept(f"{'splitting by stage' if by_stage else 'compressing'} failed: "
                                    f"{type(e).__name__}: {e}", written + [ExportedFile(whole)], finish) from e
            finally:
                fixed.unlink(missing_ok=True)
        finally:
            if raw is not None:
                raw.unlink(missing_ok=True)
            self._raw = None
        if s.write_table:
            table = self._prof.key_averages().table(sort_by=s.table_sort_key, row_limit=100)
            out = directory / f"{worker_name}.profiler_out.txt"
            write_text_atomic(out, table)
            written.append(ExportedFile(out, "table"))
        return written


_TRIM: list = []  # glibc's malloc_trim, once looked up (None: not glibc)


def return_freed_memory() -> None:
    """glibc keeps what a recording freed in its arenas: give it back to the system, so the engine's resident
    size after a chunk is what it was before, not what the chunk's post-processing left behind."""
    import ctypes

    if not _TRIM:
        try:
            trim = ctypes.CDLL("libc.so.6").malloc_trim
            trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
        except (OSError, AttributeError):  # not glibc
            trim = None
        _TRIM.append(trim)
    if _TRIM[0] is not None:
        _TRIM[0](0)


KIND = BackendKind(
    name="torch",
    devices=("cuda", "cpu", "xpu"),
    # torch_npu swaps torch.profiler.profile for its own on Ascend (SGLang applies that swap), so
    # "torch" would record through torch_npu with torch's options and export no NPU data.
    refuses={"npu": "torch records no NPU activity on Ascend; use npu (or auto)"},
    keys=KEYS,
    check=check_key,
    build=_build,
)
