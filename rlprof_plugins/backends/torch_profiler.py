"""The torch.profiler backend (CPU, CUDA, XPU activities).

Writes the same files as vLLM's native ``TorchProfilerWrapper`` (a Chrome
trace named like ``tensorboard_trace_handler`` does, and the
``profiler_out.txt`` operator table), but each through a temporary name and
an atomic rename, so no half-written trace ever appears under a final name.
"""

from __future__ import annotations

import gzip
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..store.layout import Placement, atomic_target, publish, write_text_atomic
from ..trace.naming import trace_file
from ..trace.pauses import Pause, with_pauses
from ..trace.stage_split import split_in_subprocess
from . import ExportedFile, RecordingKept
from .forked_export import export_chrome_trace
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
    # in Python while holding the GIL (8 s in 640 ms chunks for a 50 MB trace,
    # measured), so it is opt-in.
    write_table: bool = False
    table_sort_key: str = "self_cpu_time_total"
    extra_metadata: dict = field(default_factory=dict)


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

    def prepare(self, directory: Path, worker_name: str) -> None:
        """Nothing to stage: torch keeps the recording in memory until export."""

    def start(self) -> None:
        s = self.settings
        self._prof = self._torch.profiler.profile(
            activities=self._activities,
            record_shapes=s.record_shapes,
            profile_memory=s.with_memory,
            with_stack=s.with_stack,
            with_flops=s.with_flops,
            with_modules=s.with_modules,
        )
        self._prof.start()
        for key, value in s.extra_metadata.items():
            self._prof.add_metadata_json(key, value)

    def stop(self) -> None:
        assert self._prof is not None, "stop() before start()"
        self._prof.stop()

    def annotation(self, name: str):
        return self._torch.profiler.record_function(name)

    def export(self, place: Placement, worker_name: str, *, by_stage: bool = False,
               pauses: Sequence[Pause] = ()) -> list[ExportedFile]:
        """Write the trace (or one per stage) and, if asked, the table.

        ``export_chrome_trace`` is Kineto's C++ writer; it holds the GIL for
        the whole write, so it runs in a forked child (``forked_export``). Its
        file is then copied into place as bytes (no JSON parsing here):
        with the profiler's ``pauses`` as events and Kineto's unescaped
        quotes repaired (``trace.pauses``, ``trace.repair``), gzip'd when
        asked. Stage splitting parses JSON, so it runs in a child process.
        """
        assert self._prof is not None, "export() before start()"
        s = self.settings
        directory = place.ranks()
        ns = time.time_ns()
        final = directory / trace_file(worker_name, ns, gzip=s.use_gzip)
        # by stage, the whole trace is only the splitter's input: it waits in the
        # step folder, so ranks/ is made only for what lands there
        raw = atomic_target(place.root / final.name if by_stage else final)
        written: list[ExportedFile] = []
        try:
            export_chrome_trace(self._prof, raw)  # in a forked child: Kineto's writer holds the GIL
            fixed = atomic_target(raw.parent / final.name)
            packed, copied = s.use_gzip and not by_stage, False
            try:
                with (gzip.open(fixed, "wb", compresslevel=6) if packed else open(fixed, "wb")) as dst:
                    for piece in with_pauses(raw, list(pauses)):
                        dst.write(piece)
                copied = True
                if by_stage:
                    for stage, path in split_in_subprocess(fixed, place.stage_template(), f"{worker_name}.{ns}",
                                                           s.use_gzip):
                        written.append(ExportedFile(path, "trace", stage))
                else:
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
            raw.unlink(missing_ok=True)
        if s.write_table:
            table = self._prof.key_averages().table(sort_by=s.table_sort_key, row_limit=100)
            out = directory / f"{worker_name}.profiler_out.txt"
            write_text_atomic(out, table)
            written.append(ExportedFile(out, "table"))
        return written


KIND = BackendKind(
    name="torch",
    devices=("cuda", "cpu", "xpu"),
    # torch_npu swaps torch.profiler.profile for its own on Ascend (SGLang applies that swap), so
    # "torch" would record through torch_npu with torch's options and export no NPU data.
    refuses={"npu": "torch records no NPU activity on Ascend; use npu (or auto)"},
    build=lambda context, table, overrides: TorchProfilerBackend(context.torch_settings(table, overrides)),
)
