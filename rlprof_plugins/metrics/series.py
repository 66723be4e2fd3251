"""The step metrics as Prometheus series, read from the ranks' state files when ``/metrics`` is scraped.

Each rank's log thread keeps ``steps/<rank>.state.json`` (``log``, a ``record.RankTotals``):
the step open now and the running totals of every finished step. A scrape
reads those small files in the process serving ``/metrics`` (vLLM's API
server, SGLang's HTTP server), so it never touches an engine thread or
waits on one. The series (no label grows with the step number):

- ``rlprof_global_step{rank}``: the newest RL step each rank finished (the
  step whose numbers the series hold last); ``rlprof_current_step{rank}``:
  the step its iterations count for now;
- ``rlprof_iteration_seconds{stage,rank}``: a histogram of iteration times
  (the record's buckets), ``_count`` the iterations, ``_sum`` their time;
- ``rlprof_tokens_total{stage,kind,rank}``: prompt and generated tokens;
- ``rlprof_steps_total{rank}``, ``rlprof_busy_seconds_total{rank}``,
  ``rlprof_idle_seconds_total{rank}``;
- ``rlprof_last_step_busy_seconds{rank}``: the newest finished step's time
  inside iterations (across a fleet's servers, the largest is the replica
  the step waited for);
- ``rlprof_rollout_tail_seconds{rank}`` and ``rlprof_rollout_tail_ratio{rank}``: the newest
  finished step's long tail (``tail``: the time after the running batch fell below half of its
  peak for good), and its share of the step's span;
- ``rlprof_rl_phase_seconds_total{phase,rank}`` and ``rlprof_rl_phases_total{phase,rank}``: the
  time in each RL phase between generations (``phases``: weight updates, cache resets, pause,
  resume, sleep, wake-up) and how many ran;
- ``rlprof_requests_finished_total{frontend}`` and ``rlprof_longest_request_seconds{frontend}``:
  the requests each frontend saw finish, and the longest of its newest busy
  period, end to end (``requests``: the requests that held a step);
- ``rlprof_anomalies_total{reason,stage,rank}``: the flight recorder's dumps
  (``flight``), by what triggered them;
- ``rlprof_anomalies_dropped_total{reason,rank}``: its dumps dropped because
  ``disk_mb`` held only requested dumps (or the disk was full);
- where the output folder is an object store (``store.upload``), its uploads by ``destination``:
  ``rlprof_upload_files_total``, ``rlprof_upload_bytes_total``, ``rlprof_spool_removed_bytes_total``
  (local copies removed to keep the spool's bound), ``rlprof_spool_over_bound_bytes`` (data not yet
  uploaded past the bound, kept), ``rlprof_upload_pending_files`` and ``rlprof_upload_failing``.

Counters restart with the engine, as Prometheus expects of counters.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterator

from ..store.layout import STEPS_DIR
from .log import STATE_SUFFIX
from ..store import destination, upload
from .record import BUCKETS_MS, NotARecord, RankTotals
from .requests import frontend_states


class StepSeries:
    """A ``prometheus_client`` collector over ``root/steps/*.state.json``."""

    def __init__(self, root: str | Path) -> None:
        self.folder = Path(root) / STEPS_DIR

    def states(self) -> list[RankTotals]:
        out = []
        for path in sorted(self.folder.glob(f"*{STATE_SUFFIX}")):
            try:
                out.append(RankTotals.decode(path.read_text()))
            except (OSError, NotARecord):
                continue  # being replaced, or gone: the next scrape reads it
        return out

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        states = self.states()
        step = GaugeMetricFamily("rlprof_global_step", "The newest RL global step each rank finished: the one "
                                 "whose numbers these series hold last", labels=["rank"])
        current = GaugeMetricFamily("rlprof_current_step", "The RL global step each rank's iterations count for "
                                    "now", labels=["rank"])
        times = HistogramMetricFamily("rlprof_iteration_seconds", "Engine iteration time, per stage (every "
                                      "iteration, traced or not)", labels=["stage", "rank"])
        tokens = CounterMetricFamily("rlprof_tokens", "Tokens scheduled, per stage: prompt or generated",
                                     labels=["stage", "kind", "rank"])
        steps = CounterMetricFamily("rlprof_steps", "RL steps finished (their numbers written)", labels=["rank"])
        busy = CounterMetricFamily("rlprof_busy_seconds", "Time inside engine iterations", labels=["rank"])
        idle = CounterMetricFamily("rlprof_idle_seconds", "Time between engine iterations", labels=["rank"])
        last = GaugeMetricFamily("rlprof_last_step_busy_seconds", "The newest finished RL step's time inside "
                                 "engine iterations (rlprof_global_step names the step)", labels=["rank"])
        tail = GaugeMetricFamily("rlprof_rollout_tail_seconds", "The newest finished RL step's long tail: the time "
                                 "after its running batch fell below half of its peak for good", labels=["rank"])
        tail_ratio = GaugeMetricFamily("rlprof_rollout_tail_ratio", "The newest finished RL step's long tail, as a "
                                       "share of the step's span (0 to 1)", labels=["rank"])
        phase_time = CounterMetricFamily("rlprof_rl_phase_seconds", "Time in RL phases between generations (weight "
                                         "updates, cache resets, pause, resume, sleep, wake-up), by phase",
                                         labels=["phase", "rank"])
        phase_count = CounterMetricFamily("rlprof_rl_phases", "RL phases run between generations, by phase",
                                          labels=["phase", "rank"])
        anomalies = CounterMetricFamily("rlprof_anomalies", "Flight recorder dumps written, by what triggered them "
                                        "(slow_iteration, stall, slow_step, requested)",
                                        labels=["reason", "stage", "rank"])
        dropped = CounterMetricFamily("rlprof_anomalies_dropped", "Flight recorder dumps dropped for want of room "
                                      "(flight_recorder.disk_mb), by what triggered them", labels=["reason", "rank"])
        for state in states:
            rank = state.rank
            for key, count in sorted(state.anomalies.items()):
                reason, _, stage = key.partition("/")
                anomalies.add_metric([reason, stage or "all", rank], count)
            for reason, count in sorted(state.dropped_dumps.items()):
                dropped.add_metric([reason, rank], count)
            for phase, ms in sorted(state.phase_ms.items()):
                phase_time.add_metric([phase, rank], ms / 1000.0)
                phase_count.add_metric([phase, rank], state.phase_counts.get(phase, 0))
            if state.last_step is not None:
                step.add_metric([rank], state.last_step)
            if isinstance(state.global_step, int) and not isinstance(state.global_step, bool):
                current.add_metric([rank], state.global_step)
            steps.add_metric([rank], state.steps)
            busy.add_metric([rank], state.busy_ms / 1000.0)
            idle.add_metric([rank], state.idle_ms / 1000.0)
            if state.steps:
                last.add_metric([rank], state.last_busy_ms / 1000.0)
            if state.last_tail_ms is not None:
                tail.add_metric([rank], state.last_tail_ms / 1000.0)
                tail_ratio.add_metric([rank], state.last_tail_share or 0.0)
            for stage, t in sorted(state.stages.items()):
                cumulative, seen = [], 0
                for bound, count in zip(BUCKETS_MS, t.counts):
                    seen += count
                    cumulative.append(("+Inf" if math.isinf(bound) else repr(bound / 1000.0), seen))
                times.add_metric([stage, rank], cumulative, t.total_ms / 1000.0)
                tokens.add_metric([stage, "prompt", rank], t.prefill_tokens)
                tokens.add_metric([stage, "generated", rank], t.decode_tokens)
        yield from (step, current, times, tokens, steps, busy, idle, last, tail, tail_ratio, phase_time, phase_count,
                    anomalies, dropped)
        yield from self._requests(CounterMetricFamily, GaugeMetricFamily)
        yield from self._uploads(CounterMetricFamily, GaugeMetricFamily)

    def _uploads(self, counter: Any, gauge: Any) -> Iterator[Any]:
        """Where the output folder is an object store's spool (``store.upload``): its uploader's counters."""
        spool = destination.destination_at(self.folder.parent)
        totals = upload.read_totals(spool.spool) if spool else None
        if totals is None:
            return
        label = [spool.uri]
        for kind, name, text, value in (
                (counter, "rlprof_upload_files", "Files uploaded to the object store", totals.uploaded_files),
                (counter, "rlprof_upload_bytes", "Bytes uploaded to the object store", totals.uploaded_bytes),
                (counter, "rlprof_spool_removed_bytes", "Local copies removed from the spool to keep its bound "
                                                        "(each already in the object store)", totals.removed_bytes),
                (gauge, "rlprof_spool_over_bound_bytes", "Recorded data not yet uploaded past the spool's bound "
                                                         "(kept)", totals.over_bound_bytes),
                (gauge, "rlprof_upload_pending_files", "Files waiting in the spool for upload", totals.pending_files),
                (gauge, "rlprof_upload_failing", "1 while the newest upload pass failed (the status says why)",
                 totals.failing)):
            family = kind(name, text, labels=["destination"])
            family.add_metric(label, value)
            yield family

    def _requests(self, counter: Any, gauge: Any) -> Iterator[Any]:
        finished = counter("rlprof_requests_finished", "Requests the server's frontend saw finish", labels=["frontend"])
        longest = gauge("rlprof_longest_request_seconds", "The longest request of the frontend's newest busy period "
                        "(requests in flight until none were), end to end", labels=["frontend"])
        for name, state in frontend_states(self.folder.parent).items():
            finished.add_metric([name], state.get("requests") or 0)
            if isinstance(state.get("longest_s"), (int, float)):
                longest.add_metric([name], state["longest_s"])
        yield from (finished, longest)


def register(root: str | Path, registry: Any = None) -> StepSeries:
    """Add the series to ``registry`` (default: prometheus_client's global one)."""
    if registry is None:
        from prometheus_client import REGISTRY as registry
    series = StepSeries(root)
    registry.register(series)
    return series
