"""The torch_npu.profiler backend (Ascend NPUs).

torch_npu does not write one Chrome trace: while it records, it writes raw
data into a directory ``<worker>_<pid>_<time>_ascend_pt`` that its analysis
turns into ``ASCEND_PROFILER_OUTPUT/`` (``trace_view.json``, operator and
kernel tables). So this backend

- records into a hidden staging folder inside the session's folder
  (``prepare``), with torch_npu's own ``tensorboard_trace_handler`` naming
  and ``analyse_flag=False``, so the engine thread's ``stop()`` only ends
  the collection;
- on the exporter thread, runs torch_npu's analysis in a child process
  (never in an engine process: it is CPU-heavy and spawns workers), then
  renames the finished ``*_ascend_pt`` directory into the session folder in
  one step, so readers never see a half-written one;
- for by-stage sessions, splits the analysed ``trace_view.json`` into
  per-stage Chrome traces next to it.

torch_npu is imported only when a session starts.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any, Sequence

from ..store.layout import Placement
from ..trace.format.naming import ASCEND_OUTPUT_DIR as OUTPUT_DIR, ASCEND_SUFFIX, ASCEND_TRACE_VIEW as TRACE_VIEW, trace_view_of
from .._child import run_in_child
from ..trace.rewrite.stage_split import split_in_subprocess
from . import ExportedFile, RecordingKept
from . import npu_options
from .npu_options import NpuSettings
from .kind import BackendKind

STAGING_PREFIX = ".rlprof-npu-"


def experimental_config(torch_npu: Any, s: NpuSettings) -> Any:
    """torch_npu's ``_ExperimentalConfig`` for these settings."""
    p = torch_npu.profiler
    return p._ExperimentalConfig(
        export_type=[getattr(p.ExportType, t.capitalize()) for t in s.export_type],
        profiler_level=getattr(p.ProfilerLevel, s.profiler_level),
        aic_metrics=getattr(p.AiCMetrics, s.aic_metrics),
        data_simplification=s.data_simplification,
        l2_cache=False,
        msprof_tx=False,
        record_op_args=False,
        op_attr=False,
    )


def analyse_in_subprocess(profile_dir: Path, export_type: tuple[str, ...] = ("text",)) -> None:
    """Run ``torch_npu.profiler.profiler.analyse`` in a child Python process."""
    run_in_child("torch_npu.profiler.profiler:analyse", profile_dir, export_type=list(export_type),
                 what=f"torch_npu analysis of {profile_dir.name}")


class NpuProfilerBackend:
    def __init__(self, settings: NpuSettings, extra_metadata: dict[str, str] | None = None) -> None:
        self.settings = settings
        self.extra_metadata = dict(extra_metadata or {})
        self._staging: Path | None = None
        self._worker_name: str | None = None
        self._prof = None

    def prepare(self, directory: Path, worker_name: str, scratch: Path | None = None) -> None:
        """torch_npu writes while recording: give it a staging folder on the
        session folder's filesystem (published by a rename in ``export``)."""
        self._staging = directory / f"{STAGING_PREFIX}{uuid.uuid4().hex[:12]}"
        self._staging.mkdir(parents=True)
        self._worker_name = worker_name

    def start(self) -> None:
        assert self._staging is not None, "start() before prepare()"
        try:
            import torch_npu

            self._start(torch_npu)
        except BaseException:
            shutil.rmtree(self._staging, ignore_errors=True)  # a session that never recorded leaves nothing
            raise

    def _start(self, torch_npu: Any) -> None:
        s = self.settings
        p = torch_npu.profiler
        self._prof = p.profile(
            activities=[p.ProfilerActivity.CPU, p.ProfilerActivity.NPU],
            record_shapes=s.record_shapes,
            profile_memory=s.with_memory,
            with_stack=s.with_stack,
            with_modules=s.with_modules,
            experimental_config=experimental_config(torch_npu, s),
            on_trace_ready=p.tensorboard_trace_handler(str(self._staging), worker_name=self._worker_name,
                                                       analyse_flag=False),
        )
        self._prof.start()
        for key, value in self.extra_metadata.items():
            self._prof.add_metadata_json(key, value)

    def stop(self) -> None:
        assert self._prof is not None, "stop() before start()"
        self._prof.stop()

    def annotation(self, name: str):
        # torch_npu records torch's RecordFunction ranges as framework ops.
        import torch

        return torch.profiler.record_function(name)

    def export(self, place: Placement, worker_name: str, *, by_stage: bool = False,
               pauses: Sequence[Any] = ()) -> list[ExportedFile]:
        """torch_npu writes while recording and its stop does not post-process on
        the engine's thread, so ``pauses`` (the torch backend's) are not marked here."""
        assert self._staging is not None, "export() before prepare()"
        directory = place.ranks()
        failure: Exception | None = None
        try:
            produced = sorted(p for p in self._staging.iterdir() if p.is_dir() and p.name.endswith(ASCEND_SUFFIX))
            if len(produced) != 1:
                raise RuntimeError(f"torch_npu wrote {len(produced)} *{ASCEND_SUFFIX} directories "
                                   f"in {self._staging} (expected 1)")
            raw = produced[0]
            if self.settings.analyse:
                try:
                    analyse_in_subprocess(raw, self.settings.export_type)
                except Exception as e:  # the raw recording is kept; only the derived output goes
                    failure = e
                    shutil.rmtree(raw / OUTPUT_DIR, ignore_errors=True)
            final = directory / raw.name
            os.replace(raw, final)  # one rename: the directory appears complete
        finally:
            shutil.rmtree(self._staging, ignore_errors=True)
        written = [ExportedFile(final, "npu_profile")]
        if failure is not None:
            raise RecordingKept(str(failure), written, f"rlprof npu-analyse {final}")
        if by_stage:
            view = trace_view_of(final)
            if not view.exists():
                raise RecordingKept(f"by_stage needs torch_npu's {OUTPUT_DIR}/{TRACE_VIEW} in {final.name}; its "
                                    "analysis wrote none (export_type must include text)", written,
                                    f"rlprof npu-analyse {final}, then "
                                    f"rlprof split-stages {view} -o '{place.stage_template()}'")
            try:
                for stage, path in split_in_subprocess(view, place.stage_template(), f"{worker_name}.{time.time_ns()}"):
                    written.append(ExportedFile(path, "trace", stage))
            except Exception as e:
                raise RecordingKept(f"splitting by stage failed: {e}", written,
                                    f"rlprof split-stages {view} -o '{place.stage_template()}'") from e
        return written


def _unavailable() -> str | None:
    import importlib.util

    if importlib.util.find_spec("torch_npu") is None:
        return "npu records with torch_npu.profiler, and torch_npu is not installed here"
    return None


def _needs_analysis_to_split(data: dict, error) -> None:
    if data.get("backend") == "npu" and data.get("by_stage") and data.get("npu_analyse") is False:
        raise error("npu_analyse", "by_stage splits torch_npu's analysed trace_view.json; it needs npu_analyse true")


KIND = BackendKind(
    name="npu",
    devices=("npu",),
    keys=npu_options.DEFAULTS,
    check=npu_options.check_value,
    cross_check=_needs_analysis_to_split,
    unavailable=_unavailable,
    # a request's torch overrides (activities, stack...) have no NPU meaning
    build=lambda context, table, overrides: NpuProfilerBackend(
        npu_options.settings_from(context.options.backend_keys), context.extra_metadata),
)
