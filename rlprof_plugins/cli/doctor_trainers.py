"""``rlprof doctor`` for the trainers rlprof integrates with (verl).

A trainer runs the engine in-process; rlprof patches only where the RL step
comes from (``patches/verl``). The report says which verl is installed and
whether rlprof was tested on it, whether verl will load rlprof's entry point
(``VERL_USE_EXTERNAL_PLUGINS``), each patch as applying, off or failing (a
dry run on verl's real server module, or off where that server's engine is
not installed here), and where each start's global step comes from.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
from dataclasses import dataclass, field

from .doctor import PatchCheck, Verdict, check_patch, declared, given_keys
from ..patches.engines import TRAINERS


@dataclass
class TrainerReport(Verdict):
    trainer: str
    installed: bool
    version: str | None = None
    supported: bool = False
    tested: bool = False
    untested_newer: str | None = None
    patches: list[PatchCheck] = field(default_factory=list)
    plugin_loading: str = ""
    step_source: str = ""
    configure: str = ""


def _plugin_loading(facts) -> str:
    ours = [ep for ep in importlib.metadata.entry_points(group=facts.ENTRY_POINTS) if ep.name == facts.ENTRY_POINT_NAME]
    if not ours:
        return f"rlprof is not registered in the {facts.ENTRY_POINTS} entry points: reinstall rlprof-plugins"
    if not facts.plugin_allowed():
        return (f"{facts.ENTRY_POINTS} lists rlprof, but {facts.ALLOW_LIST_ENV}="
                f"{os.environ[facts.ALLOW_LIST_ENV]!r} leaves it out")
    return f"loaded by {facts.TITLE} (import {facts.NAME}) through the {facts.ENTRY_POINTS} entry point 'rlprof'"


def _offset() -> str:
    from ..errors import OptionsError
    from ..config.options import ProfileOptions
    from ..config.launch_config import ENV, from_environment

    try:
        config = from_environment()
    except OptionsError as e:
        return f"{ENV} is invalid ({e}); the engine refuses to start"
    if config is None or "trainer_step_offset" not in given_keys():
        return f"trainer_step_offset {ProfileOptions().trainer_step_offset} (the default)"
    return f"trainer_step_offset {config.options.trainer_step_offset} (from {ENV})"


def _check(facts, patch, version: str, dry: bool) -> PatchCheck:
    engine = next((e for e, module in facts.SERVER_MODULES.items() if module == patch.module), None)
    if engine is not None and importlib.util.find_spec(engine) is None:
        return PatchCheck(patch.name, patch.module, "off", f"{engine} is not installed here: verl's {engine} "
                                                           "server does not run in this environment")
    return check_patch(patch, version) if dry else declared(patch, version)


def diagnose_trainer(name: str, *, dry_run: bool = True) -> TrainerReport:
    from .. import patches
    from ..patches import shapes

    facts = TRAINERS[name]
    version = facts.version()
    report = TrainerReport(trainer=name, installed=version is not None, version=version)
    if version is None:
        return report
    report.untested_newer = shapes.untested_newer(facts.TESTED, version)
    group = [p for p in patches.ALL_PATCHES if p.engine == name]
    report.supported = any(p.supports(version) for p in group) or report.untested_newer is not None
    report.tested = version in facts.TESTED
    report.patches = [_check(facts, p, version, dry_run) for p in group]
    report.plugin_loading = _plugin_loading(facts)
    report.step_source = ("a start's global step: the caller's global_step if it passes one, else the server "
                          f"actor's weights version (set_global_steps, at each weight sync) + {_offset()}; "
                          "before the first sync, none (the engine's default folder)")
    report.configure = ("rlprof's keys reach verl's server actors through Ray: "
                        "+ray_kwargs.ray_init.runtime_env.env_vars.RLPROF_PROFILER_CONFIG='\"{...}\"'; "
                        "relocate_results moves each step folder whole into save_path (docs/verl.md, relocate_results)")
    return report


def render_trainer(report: TrainerReport) -> str:
    facts = TRAINERS[report.trainer]
    if not report.installed:
        return f"{facts.TITLE}: not installed"
    lines = report.head_lines(f"{facts.TITLE} {report.version}", facts.VERSIONS, facts.TESTED,
                              ": verl starts rollout profiling without a step")
    lines += report.patch_lines()
    lines += [f"  plugin: {report.plugin_loading}", f"  step: {report.step_source}",
              f"  configure: {report.configure}"]
    return "\n".join(lines)
