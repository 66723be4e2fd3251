"""``rlprof doctor``: what rlprof can do with the engine installed here.

For each engine it finds (vLLM, SGLang): the version and whether rlprof
supports and was tested on it (``rlprof_plugins.cli.compatibility``), each feature as
available or not with the reason, each patch as applying, off by version,
or failing (a dry run: applied to the real module, then reverted), whether
the engine will load the plugin, what in the environment matters, and how to
configure profiling on that release. Importing the engine's modules takes a
few seconds; ``--no-import`` skips the dry run.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import textwrap
import sys
from dataclasses import asdict, dataclass, field

from .. import __version__
from . import compatibility as compat
from .._env import allowed_by, on
from .doctor_backends import backend_lines, backends
from ..patches.engines import ENGINES, tested_releases


@dataclass
class PatchCheck:
    name: str
    module: str
    state: str  # "applies" | "off" (not for this release) | "fails"
    detail: str


class Verdict:
    """What an engine's and a trainer's report answer alike: usable here, and as JSON."""

    @property
    def ok(self) -> bool:
        return self.installed and self.supported and not any(p.state == "fails" for p in self.patches)

    def to_json(self) -> dict:
        return {**asdict(self), "ok": self.ok}

    def head_lines(self, heading: str, supported_range: str, tested: tuple[str, ...],
                   unsupported: str = "") -> list[str]:
        """The heading, then whether this release is supported and tested (``unsupported``: what follows if not)."""
        if self.untested_newer:
            verdict = (f"supported: newer than the newest tested release {self.untested_newer}; each patch applies "
                       f"where what it relies on keeps the shape verified on {self.untested_newer} "
                       "(RLPROF_STRICT_VERSIONS=1 refuses this release)")
        elif self.supported:
            verdict = "supported"
        else:
            verdict = f"NOT supported (rlprof supports {supported_range}){unsupported}"
        return [heading, f"  {verdict}; {'a tested release' if self.tested else 'not a tested release'} "
                         f"(tested: {', '.join(tested)})"]

    def patch_lines(self) -> list[str]:
        return ["  patches:", *(f"    [{p.state:7}] {p.name} ({p.module}): {p.detail}" for p in self.patches)]


@dataclass
class EngineReport(Verdict):
    engine: str
    installed: bool
    version: str | None = None
    location: str | None = None
    supported: bool = False
    tested: bool = False
    # Newer than the newest tested release: patches apply where their shape holds.
    untested_newer: str | None = None  # the newest tested release it is checked against
    features: list[dict] = field(default_factory=list)
    patches: list[PatchCheck] = field(default_factory=list)
    plugin_loading: str = ""
    environment: list[str] = field(default_factory=list)
    configure: str = ""
    frontends: list[dict] = field(default_factory=list)  # those that bypass the patched API server
    backends: list[dict] = field(default_factory=list)  # the recorders a session can use (doctor_backends)


def _version(engine: str) -> tuple[str | None, str | None]:
    if importlib.util.find_spec(engine) is None:
        return None, None
    package = importlib.import_module(engine)
    return ENGINES[engine].version(), os.path.dirname(package.__file__)


def _present_targets(patch, module) -> str:
    from ..patches.base import resolve

    out = []
    for target in patch.targets:
        if target in patch.optional:
            try:
                getattr(*resolve(module, target))
            except AttributeError:
                continue  # an optional hook this release does not have
        out.append(target)
    return ", ".join(out)


UNTESTED_OK = "untested release, shape checked"


def declared(patch, version: str) -> PatchCheck:
    """What the declarations alone say of ``patch`` on ``version`` (``--no-import``)."""
    how = patch.covers(version, tested_releases(patch.engine))
    return PatchCheck(patch.name, patch.module, "applies" if how else "off",
                      "not checked (--no-import)" if how else f"declared for {patch.versions}")


def check_patch(patch, version: str) -> PatchCheck:
    from ..patches import shapes
    from ..patches.base import apply_guarded

    tested = tested_releases(patch.engine)
    how = patch.covers(version, tested)
    if how is None:
        strict = " (RLPROF_STRICT_VERSIONS is set)" if shapes.strict() and tested else ""
        return PatchCheck(patch.name, patch.module, "off", f"declared for {patch.versions}{strict}")
    try:
        module = importlib.import_module(patch.module)
    except Exception as e:
        return PatchCheck(patch.name, patch.module, "fails", f"importing {patch.module}: {type(e).__name__}: {e}")
    note = ""
    if how == "shape":
        newest = shapes.untested_newer(tested, version)
        changed = shapes.changes(patch, module, newest)
        if changed:
            return PatchCheck(patch.name, patch.module, "off",
                              f"untested release; changed since the tested {newest}: " + "; ".join(changed))
        note = f" ({UNTESTED_OK} against {newest})"
    if patch.applied:
        return PatchCheck(patch.name, patch.module, "applies",
                          _present_targets(patch, module) + note + " (applied in this process)")
    if not apply_guarded(patch, module, version, tested):
        return PatchCheck(patch.name, patch.module, "fails", "a target is missing or changed (see the warning above)")
    try:
        return PatchCheck(patch.name, patch.module, "applies", _present_targets(patch, module) + note)
    finally:
        patch.revert()


def _plugin_loading(engine: str, version: str) -> str:
    facts = ENGINES[engine]
    group = facts.ENTRY_POINTS
    ours = [ep for ep in importlib.metadata.entry_points(group=group) if ep.value.startswith("rlprof_plugins.")]
    if not ours:
        return f"rlprof is not registered in the {group} entry points: reinstall rlprof-plugins"
    if engine == "sglang" and importlib.util.find_spec("sglang.srt.plugins") is None:
        autoload = on("RLPROF_SGLANG_AUTOLOAD")
        return ("SGLang " + version + " has no plugin entry points; RLPROF_SGLANG_AUTOLOAD=1 is "
                + ("set: rlprof_plugins.pth loads the plugin in every SGLang process" if autoload
                   else "NOT set: export it before launching, or the plugin never loads"))
    if not allowed_by(facts.ALLOW_LIST_ENV):
        return f"{group} lists rlprof, but {facts.ALLOW_LIST_ENV}={os.environ[facts.ALLOW_LIST_ENV]!r} leaves it out"
    return f"loaded by the engine through the {group} entry point 'rlprof'"


def given_keys() -> set[str]:
    """rlprof's keys that ``RLPROF_PROFILER_CONFIG`` itself names."""
    import json

    from ..config.options import OUR_KEYS
    from ..config.launch_config import ENV

    try:
        return set(json.loads(os.environ.get(ENV, "{}"))) & set(OUR_KEYS)
    except ValueError:
        return set()


def python_stacks_note(config: object | None) -> str:
    """Which Python stacks sessions record (``python_stacks``, ``backends.stack_sampler``), and how."""
    from ..backends import stack_sampler
    from ..backends.torch_profiler import DEFAULT_STACKS, with_python_stacks, TorchSettings

    if config is not None:
        keys, with_stack, where = config.options.backend_keys, config.torch_profiler_with_stack, ENV_NAME
    else:  # what a configuration writing no stack key records (launch_config.parse_profiler_config)
        keys, with_stack, where = {"python_stacks": DEFAULT_STACKS}, False, "a configuration writing no stack key"
    settings = with_python_stacks(TorchSettings(with_stack=with_stack), keys)
    mode = settings.python_stacks
    if mode == "sampled":
        rate = (f"at up to {settings.sample_hz} Hz, within {settings.sample_budget:.0%} of the engine thread's time"
                if settings.sample_budget else f"at {settings.sample_hz} Hz")
        how = (f"sampled {rate} (a signal timer on the engine's main thread; elsewhere a "
               "sampler thread, with one warning); `\"python_stacks\": \"exact\"` or "
               "`\"torch_profiler_with_stack\": true` records torch's exact stacks")
    elif mode == "exact":
        how = ("exact (torch's with_stack: an event per Python call; `\"python_stacks\": \"sampled\"` samples at "
               f"{stack_sampler.DEFAULT_HZ} Hz for a fraction of the cost)")
    else:
        how = "off"
    return f"python stacks ({where}): {how}"


def torch_stop_note(config: object | None) -> str:
    """Where torch's stop runs and when a recording's chunks end (``session.chunk_plan``), from the server's
    ``chunk_iterations``, ``max_pause_ms`` and ``max_recording_mb`` (the defaults where ``config`` is None)."""
    from ..config.options import CHUNK_AUTO, DEFAULT_MAX_PAUSE_MS, DEFAULT_MAX_RECORDING_MB

    options = getattr(config, "options", None)
    chunks = getattr(options, "chunk_iterations", CHUNK_AUTO)
    pause_ms = getattr(options, "max_pause_ms", DEFAULT_MAX_PAUSE_MS)
    budget_mb = getattr(options, "max_recording_mb", DEFAULT_MAX_RECORDING_MB)
    if chunks == 0:
        when = "one torch session per window, stopped at its end"
    elif chunks == CHUNK_AUTO:
        when = (f"each busy stretch one chunk, stopped when the engine waits for work or the process grew by "
                f"{budget_mb} MB; a session begun under traffic that never waits: chunks of {pause_ms // 2} ms "
                f"of predicted stop (max_pause_ms {pause_ms})")
    else:
        when = f"a chunk every {chunks} iterations, or once the process grew by {budget_mb} MB"
    return f"torch's stop: on the engine thread, where it recorded, with the trace's save; {when}"


ENV_NAME = "RLPROF_PROFILER_CONFIG"


def _environment(engine: str, version: str) -> list[str]:
    from packaging.version import Version

    from ..config.launch_config import ENV, from_environment

    notes = []
    if on("RLPROF_DISABLE"):
        notes.append("RLPROF_DISABLE is set: the plugin is turned off")
    try:
        config = from_environment()
        if config is not None:
            notes.append(f"{ENV} is set and valid (trace dir {config.torch_profiler_dir})")
            ours = {k: v for k, v in config.options.to_dict().items() if k in given_keys()}
            if ours:
                notes.append(f"{ENV} merges these rlprof keys over the engine's own profiler configuration "
                             f"(a key set differently in both stops the launch): {ours}")
    except Exception as e:
        notes.append(f"{ENV} is set but invalid: {e}")
        config = None
    notes.append(python_stacks_note(config))
    notes.append(torch_stop_note(config))
    vllm = ENGINES["vllm"]
    legacy = sorted(k for k in os.environ if k.startswith(vllm.LEGACY_ENV))
    if engine == vllm.NAME and legacy:
        v = Version(version)
        if v >= Version(vllm.LEGACY_ENV_GONE):
            notes.append(f"{', '.join(legacy)}: not read by vLLM {version} (removed in {vllm.LEGACY_ENV_GONE}); "
                         "newer releases warn")
        elif v >= Version(vllm.CONFIG_FIRST):
            notes.append(f"{', '.join(legacy)}: on vLLM {version} these override --profiler-config; unset them")
        else:
            notes.append(f"{', '.join(legacy)}: vLLM's own profiler; rlprof's sessions need {ENV}")
    return notes


def diagnose(engine: str, *, dry_run: bool = True) -> EngineReport:
    from ..patches import ALL_PATCHES

    version, location = _version(engine)
    report = EngineReport(engine=engine, installed=version is not None, version=version, location=location)
    if version is None:
        return report
    from ..patches import shapes

    report.untested_newer = shapes.untested_newer(tested_releases(engine), version)
    report.supported = compat.supported(engine, version) or report.untested_newer is not None
    report.tested = any(version == t or version.startswith(t + "+") for t in compat.TESTED[engine])
    for patch in (p for p in ALL_PATCHES if p.engine == engine):
        report.patches.append(check_patch(patch, version) if dry_run else declared(patch, version))
    applying = {p.name for p in report.patches if p.state == "applies"}
    for status in (compat.features(engine, version, applies=lambda p: p.name in applying)
                   + compat.capabilities(engine, version)):
        report.features.append({"feature": status.feature, "available": status.available, "reason": status.reason})
    report.plugin_loading = _plugin_loading(engine, version)
    report.environment = _environment(engine, version)
    report.configure = compat.how_to_configure(engine, version)
    report.backends = backends(engine, version, probe=dry_run)
    report.frontends = [{"frontend": f.name, "chosen_by": f.chosen_by, "in_release": f.exists_in(version),
                         "in_use": f.in_use(), "works": f.works, "lacks": f.lacks}
                        for f in getattr(ENGINES[engine], "FRONTENDS", ())]
    return report


def diagnose_all(engines: list[str], *, dry_run: bool = True) -> list[EngineReport]:
    """``diagnose`` each engine, quietly (``printing_to_stderr``)."""
    return printing_to_stderr(lambda: [diagnose(e, dry_run=dry_run) for e in engines])


def printing_to_stderr(work):
    """``work()``, with what the engines print while their modules import sent
    to stderr, so stdout keeps only the result."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        return work()
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def render(report: EngineReport) -> str:
    title = ENGINES[report.engine].TITLE
    if not report.installed:
        return f"{title}: not installed"
    lines = report.head_lines(f"{title} {report.version} at {report.location}", compat.SUPPORTED[report.engine],
                              compat.TESTED[report.engine])
    lines.append("  features:")
    for f in report.features:
        mark = "yes" if f["available"] else "no "
        reason = f": {f['reason']}" if f["reason"] and not f["available"] else ""
        lines.append(f"    [{mark}] {f['feature']}{reason}")
    lines += report.patch_lines()
    lines += backend_lines(report.backends)
    lines.append(f"  plugin: {report.plugin_loading}")
    for note in report.environment:
        lines.append(f"  environment: {note}")
    lines.append(f"  configure: {report.configure}")
    for f in report.frontends:
        if f["in_release"] or f["in_use"]:
            state = "IN USE" if f["in_use"] else "not in use"
            lines.append(f"  frontend {f['frontend']} ({f['chosen_by']}): {state} here; it bypasses rlprof's "
                         f"API-server patches. Works: {f['works']}. Not available: {f['lacks']}")
    return "\n".join(folded(line) for line in lines)


WIDTH = 110  # a line of the report on a terminal, in a log, pasted into the docs


def folded(line: str) -> str:
    """A long line folded at ``WIDTH``, its continuation indented under its text."""
    if len(line) <= WIDTH:
        return line
    indent = " " * (len(line) - len(line.lstrip()) + 4)
    return "\n".join(textwrap.wrap(line, width=WIDTH, subsequent_indent=indent, break_long_words=False,
                                   break_on_hyphens=False))


def header() -> str:
    return f"rlprof-plugins {__version__} doctor"
