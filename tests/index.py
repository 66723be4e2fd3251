"""Where each module of the package is tested: ``python -m tests.index MODULE``.

A module's tests are every test file that imports it (found by reading the
imports, so that part cannot go stale) plus, for a module reached only
through a command, an engine or a child process, the files named below.
``tests/unit/test_layers.py`` keeps the index true: every module has at least
one test file, every file named here exists and every module named here
exists. Package faces (``__init__``) are tested through their modules.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

# Modules no test file imports by name: the test files that run them.
REACHED_THROUGH: dict[str, tuple[str, ...]] = {
    "rlprof_plugins._bootstrap": ("tests/vllm/test_plugin_loading.py",),
    "rlprof_plugins._command": ("tests/unit/test_cli_commands.py",),
    "rlprof_plugins._env": ("tests/unit/test_shapes.py",),
    # the report's run on Ray: through `rlprof report/summary --json --ray` in a child
    "rlprof_plugins.report.execute.on_ray.driver": ("tests/ray/test_report_on_ray.py",),
    "rlprof_plugins.report.execute.on_ray.cluster": ("tests/ray/test_report_on_ray.py",),  # the session on the joined cluster
    # the frontends' request times, live: the rollout with one long response (tests/helpers/rollout_tail.py)
    "rlprof_plugins.patches.vllm.request_times": ("tests/e2e/test_vllm_server_tp1.py",),
    "rlprof_plugins.patches.sglang.request_times": ("tests/e2e/test_sglang_server_tp1.py",),
    "rlprof_plugins.patches.vllm.request_keeper": ("tests/e2e/test_vllm_server_tp1.py",
                                                   "tests/verl/test_verl_replica.py"),
    "rlprof_plugins.patches.sglang.request_keeper": ("tests/e2e/test_sglang_server_tp1.py",
                                                     "tests/verl/test_verl_replica.py"),
    "rlprof_plugins.backends.npu_options": ("tests/npu/test_npu_backend.py",),
    "rlprof_plugins.backends.npu_profiler": ("tests/npu/test_npu_backend.py",),
    "rlprof_plugins.backends.registry": ("tests/unit/test_options.py",),
    "rlprof_plugins.backends.cuda_profiler": ("tests/unit/test_cuda_backend.py", "tests/e2e/test_nsys_ranges.py"),
    "rlprof_plugins.cli.__main__": ("tests/e2e/test_trainer_control.py",),
    # errors, progress and exit codes: every command's, asserted through the command line
    "rlprof_plugins.cli.common": ("tests/unit/test_cli_commands.py", "tests/unit/test_trace_merge.py"),
    "rlprof_plugins.cli.installation": ("tests/packaging/test_wheel.py",),
    "rlprof_plugins.cli.report_command": ("tests/unit/test_report_command.py", "tests/unit/test_cli_commands.py"),
    # `rlprof upload` in a child process, as a user finishes a failed upload
    "rlprof_plugins.cli.upload_command": ("tests/unit/test_object_store_output.py",),
    "rlprof_plugins.cli.trace_commands": ("tests/unit/test_trace_merge.py", "tests/unit/test_cli_commands.py"),
    "rlprof_plugins.client.collect": ("tests/e2e/test_vllm_two_nodes.py", "tests/e2e/test_sglang_two_nodes.py"),
    "rlprof_plugins.client.profiler": ("tests/unit/test_client.py", "tests/e2e/test_trainer_control.py"),
    "rlprof_plugins.client.results": ("tests/unit/test_client.py",),
    "rlprof_plugins.config.recorded": ("tests/unit/test_requests.py", "tests/unit/test_memory_history.py"),
    "rlprof_plugins.entry_points.sglang": ("tests/e2e/test_sglang_server_tp1.py",),
    "rlprof_plugins.entry_points.verl": ("tests/clients/test_verl_vllm.py", "tests/clients/test_verl_sglang.py"),
    "rlprof_plugins.entry_points.vllm": ("tests/vllm/test_plugin_loading.py",),
    "rlprof_plugins.session.api_server_recorder": ("tests/e2e/test_vllm_server_tp1.py",),
    "rlprof_plugins.session.recording_output": ("tests/unit/test_session.py", "tests/unit/test_chunks.py"),
    "rlprof_plugins.session.exporter": ("tests/unit/test_session.py", "tests/unit/test_idle_chunks.py"),
    "rlprof_plugins.session.finalize": ("tests/unit/test_session.py", "tests/e2e/test_vllm_server_tp2.py"),
    "rlprof_plugins.session.recording": ("tests/unit/test_session.py", "tests/unit/test_chunks.py"),
    "rlprof_plugins.session.states": ("tests/unit/test_session.py",),
    "rlprof_plugins.step_sources.prefix": ("tests/unit/test_step_source.py",),
    "rlprof_plugins.step_sources.which_step": ("tests/unit/test_step_source.py",),
    "rlprof_plugins.store.recovery": ("tests/unit/test_chunks.py",),
    "rlprof_plugins.trace.rewrite.align": ("tests/unit/test_multinode.py",),
    "rlprof_plugins.trace.format.clock": ("tests/unit/test_multinode.py", "tests/unit/test_trace_merge.py"),
    "rlprof_plugins._parallel": ("tests/unit/test_trace_merge.py",),
    "rlprof_plugins.trace.format.rank_files": ("tests/unit/test_trace_merge.py", "tests/unit/test_multinode.py"),
    "rlprof_plugins.store.step_files": ("tests/unit/test_trace_merge.py", "tests/unit/test_report_on_ray_parts.py"),
    "rlprof_plugins.trace.rewrite.rename": ("tests/unit/test_trace_merge.py", "tests/unit/test_chunks.py"),
    "rlprof_plugins.trace.analysis.time_split": ("tests/unit/test_report_steps.py",),
    "rlprof_plugins.trace.analysis.device_time": ("tests/unit/test_gpu_traces_published.py", "tests/unit/test_report_steps.py"),
    "rlprof_plugins.report.render.charts": ("tests/unit/test_report_command.py",),
    "rlprof_plugins.report.render.compare": ("tests/unit/test_report_command.py",),
    "rlprof_plugins.report.render.page": ("tests/unit/test_report_command.py",),
    "rlprof_plugins.report.render.fleet": ("tests/unit/test_fleet_report.py", "tests/e2e/test_fleet_live.py"),
    "rlprof_plugins.report.render.fleet_view": ("tests/unit/test_fleet_report.py",),
    "rlprof_plugins.report.render.rollout_view": ("tests/unit/test_rollout_tail.py",),
    "rlprof_plugins.report.plan.measured_rows": ("tests/unit/test_step_metrics.py",),
    "rlprof_plugins.metrics.engine_hook": ("tests/unit/test_step_metrics.py", "tests/e2e/test_step_metrics_live.py"),
    "rlprof_plugins.metrics.series": ("tests/unit/test_step_metrics.py", "tests/e2e/test_step_metrics_live.py"),
    "rlprof_plugins.report.execute.memory_pass": ("tests/unit/test_memory_history.py",),
    "rlprof_plugins.trace.analysis.memory_snapshot": ("tests/unit/test_memory_history.py",),
    "rlprof_plugins.report.render.step_section": ("tests/unit/test_report_command.py", "tests/unit/test_report_truth.py"),
    "rlprof_plugins.patches.__main__": ("tests/unit/test_patch_table.py",),
    "rlprof_plugins.patches.features": ("tests/unit/test_patch_table.py",),
    "rlprof_plugins.patches.http_common": ("tests/e2e/test_vllm_server_access.py", "tests/e2e/test_sglang_server_tp1.py"),
    "rlprof_plugins.patches.sglang.engine": ("tests/compat/contract_sglang.py",),
    "rlprof_plugins.patches.sglang.phases": ("tests/e2e/test_sglang_server_tp1.py", "tests/verl/test_verl_replica.py"),
    "rlprof_plugins.patches.sglang.step_metrics": ("tests/e2e/test_sglang_server_tp1.py",
                                                   "tests/e2e/test_step_metrics_live.py"),
    "rlprof_plugins.patches.sglang.native_requests": ("tests/e2e/test_bypassing_frontends.py",),
    "rlprof_plugins.patches.sglang.tokenizer": ("tests/compat/contract_sglang.py",),
    "rlprof_plugins.patches.vllm.cuda_profiler": ("tests/e2e/test_nsys_ranges.py",),
    "rlprof_plugins.patches.vllm.phases": ("tests/e2e/test_vllm_server_tp2.py", "tests/verl/test_verl_replica.py"),
    "rlprof_plugins.patches.vllm.api_router": ("tests/compat/contract_vllm.py", "tests/e2e/test_vllm_server_access.py"),
    "rlprof_plugins.patches.vllm.async_llm": ("tests/e2e/test_vllm_inprocess.py", "tests/compat/contract_vllm.py"),
    "rlprof_plugins.patches.vllm.iterations": ("tests/compat/contract_vllm.py",),
    "rlprof_plugins.patches.vllm.profiler_config": ("tests/vllm/test_vllm_config_keys.py",),
    "rlprof_plugins.patches.vllm.sessions": ("tests/e2e/test_vllm_inprocess.py", "tests/e2e/test_vllm_server_tp1.py"),
    "rlprof_plugins.patches.vllm.worker_hooks": ("tests/vllm/test_vllm_patches.py", "tests/compat/contract_vllm.py"),
}


def test_files() -> list[Path]:
    root = Path(__file__).resolve().parent
    return sorted(p for p in root.rglob("*.py") if p.name.startswith(("test_", "contract_")))


def tests_of(module: str) -> list[str]:
    """Every test file of ``module``: those importing it, then those running it."""
    found = list(_importers().get(module, ()))
    return found + [t for t in REACHED_THROUGH.get(module, ()) if t not in found]


@functools.lru_cache(maxsize=1)
def _importers() -> dict[str, list[str]]:
    """Each module -> the test files importing it (every test file read once: 30 s became 1 s)."""
    from tests.unit.test_layers import REPO, imports, modules, resolve

    known, index = modules(), {}
    for path in test_files():
        name = ".".join(path.relative_to(REPO).with_suffix("").parts)
        for _, target in imports(name, path):
            found = resolve(target, known)
            files = index.setdefault(found, [])
            if str(path.relative_to(REPO)) not in files:
                files.append(str(path.relative_to(REPO)))
    return index


def main(argv: list[str]) -> int:
    """Print each named module's test files; exit 1 naming every name that is no module of the package."""
    from tests.unit.test_layers import modules

    known = modules()
    unknown = [name for name in argv if name not in known]
    for name in unknown:
        close = sorted(k for k in known if k.endswith("." + name.rpartition(".")[2]))
        print(f"tests.index: no module {name}" + (f" (did you mean {', '.join(close)}?)" if close else ""),
              file=sys.stderr)
    for wanted in argv:
        if wanted not in unknown:
            print(wanted, *tests_of(wanted), sep="\n  ")
    return 1 if unknown or not argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
