"""Which engine releases rlprof is tested against, and what works on each.

The feature x release table of ``docs/compatibility.md`` and the answers of
``rlprof doctor`` come from here: a feature is available on a release when,
for every engine area the feature touches, one of its patches declares that
release (``patches/*.py``). ``tests/compat`` runs the contract tests on each
release in ``TESTED`` against that release's own modules, asserting every
cell of the table (a declared patch applies and works; an undeclared one is
refused with one warning), so the table cannot claim what is not tested.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

# Releases whose real modules the contract tests run against, unpacked from
# their published wheels (tests/compat/releases.py), except the one installed
# in each test environment, which tests/e2e also serves end to end (vLLM 0.32:
# 0.33 has no CPU build). Each has its recorded shapes (patches/shape_records/).
TESTED: dict[str, tuple[str, ...]] = {
    "vllm": ("0.10.2.post2", "0.12.0.post2", "0.13.0", "0.15.1", "0.16.0", "0.17.1", "0.24.0", "0.32.0", "0.33.0"),
    "sglang": ("0.5.5", "0.5.9", "0.5.12", "0.5.13", "0.5.15", "0.5.23"),
}
# The subset CI runs (one per era boundary that matters most); `make compat` runs all.
CI_SUBSET: dict[str, tuple[str, ...]] = {
    "vllm": ("0.12.0.post2", "0.16.0", "0.32.0", "0.33.0"),
    "sglang": ("0.5.9", "0.5.15", "0.5.23"),
}
# The declared range of each engine: from its oldest supported release to just
# past its newest tested one. Patches declare their ranges with
# ``versions_from`` so this upper bound is written once. Newer releases of the
# same major are covered by the shape rule (patches/shapes.py), not by this range.
_FIRST = {"vllm": "0.10", "sglang": "0.5.5"}
_BELOW = {"vllm": "0.34", "sglang": "0.5.24"}


def versions_from(engine: str, first: str | None = None) -> str:
    """The specifier ``>=first,<(past the newest tested release)`` for ``engine``."""
    return f">={first or _FIRST[engine]},<{_BELOW[engine]}"


SUPPORTED = {engine: versions_from(engine) for engine in _FIRST}

# How profiling is configured on each era (first matching range wins).
HOW_TO_CONFIGURE: dict[str, tuple[tuple[str, str], ...]] = {
    "vllm": (
        ("<0.13", "no --profiler-config on this release: set RLPROF_PROFILER_CONFIG='{\"torch_profiler_dir\": "
                  "\"/traces\", \"step_start\": 2, \"step_end\": 6}' (same JSON keys) in the server's "
                  "environment and start it with `vllm serve`; VLLM_TORCH_PROFILER_DIR is not needed"),
        ("<0.16", "vllm serve --profiler-config '{\"profiler\": \"torch\", \"torch_profiler_dir\": \"/traces\", "
                  "\"step_start\": 2, \"step_end\": 6}'; do not also set VLLM_TORCH_PROFILER_* (on this release "
                  "they override the flag)"),
        ("", "vllm serve --profiler-config '{\"profiler\": \"torch\", \"torch_profiler_dir\": \"/traces\", "
             "\"step_start\": 2, \"step_end\": 6}'"),
    ),
    "sglang": (
        ("<0.5.12", "this release has no plugin entry points: export RLPROF_SGLANG_AUTOLOAD=1 before "
                    "launching, then pass --profiler-config '{\"torch_profiler_dir\": \"/traces\", "
                    "\"step_start\": 2, \"step_end\": 6}' (or set RLPROF_PROFILER_CONFIG)"),
        ("", "python -m sglang.launch_server ... --profiler-config '{\"torch_profiler_dir\": \"/traces\", "
             "\"step_start\": 2, \"step_end\": 6}' (or set RLPROF_PROFILER_CONFIG)"),
    ),
}


# What depends on the engine release itself rather than on a patch:
# (name, releases that have it, what happens on the others). The contract
# tests probe each one on every tested release.
CAPABILITIES: dict[str, tuple[tuple[str, str, str], ...]] = {
    "vllm": (
        ("stop answered before the profiler stops", ">=0.17",
         "EngineCore has no idle callbacks: the stop (torch's, seconds with stacks) runs on the engine loop "
         "before the answer; export still runs in the background"),
        ("prefill/decode from vLLM's compute_iteration_details", ">=0.15",
         "rlprof's own rule: a cached request scheduled for more than one token counts as prefill "
         "(speculative decoding steps too)"),
        ("vLLM's rank names in trace files (dp0_pp0_tp0_..._rank0)", ">=0.17", "files are named rank<r>"),
    ),
    "sglang": (
        ("plugin loaded by SGLang's sglang.srt.plugins entry point", ">=0.5.12",
         "set RLPROF_SGLANG_AUTOLOAD=1 in the launch environment (loads the plugin from rlprof_plugins.pth "
         "in every SGLang process)"),
        ("stop completed from the scheduler's on_idle hook", ">=0.5.12",
         "completed from self_check_during_idle instead (same effect)"),
    ),
}


@dataclass(frozen=True)
class FeatureStatus:
    feature: str
    available: bool
    reason: str
    patches: tuple[str, ...]  # the patches that serve it on this release


def _in(version: str, spec: str) -> bool:
    from packaging.specifiers import SpecifierSet

    return not spec or Version(version) in SpecifierSet(spec)


def features(engine: str, version: str, applies=None) -> list[FeatureStatus]:
    """Each rlprof feature of ``engine`` on ``version``: from the declarations,
    or from ``applies(patch)`` (what a dry run found, e.g. on an untested release)."""
    from .patches import ALL_PATCHES

    mine = [p for p in ALL_PATCHES if p.engine == engine]
    fits_release = applies or (lambda p: p.supports(version))
    out = []
    for feature in dict.fromkeys(p.feature for p in mine):
        serving = [p for p in mine if p.feature == feature]
        areas = dict.fromkeys(p.area_name for p in serving)
        chosen, missing = [], []
        for area in areas:
            fits = [p for p in serving if p.area_name == area and fits_release(p)]
            (chosen.extend(fits) if fits else missing.append(area))
        # declared for (or covered by the shape rule on) this release, yet not applying
        refused = [p.name for p in serving if p.area_name in missing and p.covers(version)]
        if refused:
            reason = f"not on {engine} {version}: patch {', '.join(refused)} is off (see the patches: what changed)"
        elif missing:
            ranges = ", ".join(sorted({p.versions for p in serving}))
            reason = f"not on {engine} {version}: verified for {ranges}"
        else:
            reason = "patches " + ", ".join(p.name for p in chosen)
        out.append(FeatureStatus(feature, not missing, reason, tuple(p.name for p in chosen)))
    return out


def capabilities(engine: str, version: str) -> list[FeatureStatus]:
    return [FeatureStatus(name, _in(version, spec), "" if _in(version, spec) else otherwise, ())
            for name, spec, otherwise in CAPABILITIES[engine]]


def how_to_configure(engine: str, version: str) -> str:
    for spec, text in HOW_TO_CONFIGURE[engine]:
        if _in(version, spec):
            return text
    return ""


def supported(engine: str, version: str) -> bool:
    try:
        return _in(version, SUPPORTED[engine])
    except Exception:
        return False


def markdown() -> str:
    """docs/compatibility.md, generated (``python -m rlprof_plugins.compat``)."""
    lines = [
        "# Compatibility",
        "",
        "Generated by `python -m rlprof_plugins.compat > docs/compatibility.md` from the patch",
        "declarations and the tested releases in `rlprof_plugins/compat.py`;",
        "`tests/compat/test_compat_table.py` fails when this file and the code disagree, and the",
        "contract tests (`make compat`; CI runs the releases marked CI) assert every cell on the",
        "release's own modules. How the releases are tested: docs/testing.md.",
        "",
        f"Supported: vLLM `{SUPPORTED['vllm']}`, SGLang `{SUPPORTED['sglang']}`, and newer releases of the same",
        "major version under the rule below. `rlprof doctor` tells what the installed engine supports.",
        "",
        "## Releases newer than the tested ones",
        "",
        "An engine ships a release every few weeks; rlprof does not go dark on each one. On a release",
        "newer than the newest tested one (same major version), each patch declared for that newest",
        "release applies when everything it relies on still has the shape it had there: the",
        "signatures of the callables it wraps, the attributes it adds still free, and the helpers, fields",
        "and parameters it reads (the *relies on* column of docs/patches.md). Those shapes are recorded",
        "per tested release in `patches/shape_records/<engine>/<release>.json`, generated from the",
        "release's own modules (`make shapes`) and checked against them by its contract tests, so a",
        "record cannot drift from the release it describes.",
        "",
        "- The engine logs one line naming the untested release at start-up.",
        "- A patch whose targets changed is off, with one warning naming the patch, the release and",
        "  what changed (e.g. `Worker.profile: (self, is_start=, ...) -> (self, is_start=, mode, ...)`);",
        "  the other patches keep working, and the engine runs as if that patch were absent.",
        "- `rlprof doctor` shows each patch as `applies (untested release, shape checked ...)` or `off`",
        "  with what changed.",
        "- `RLPROF_STRICT_VERSIONS=1` refuses every release outside the declared ranges, as before.",
        "- `make compat-latest` runs the contract tests on the newest vLLM and SGLang on PyPI that day",
        "  (docs/testing.md).",
    ]
    for engine, title in (("vllm", "vLLM"), ("sglang", "SGLang")):
        releases = TESTED[engine]
        table = {v: features(engine, v) for v in releases}
        head = [f"{v}{' (CI)' if v in CI_SUBSET[engine] else ''}" for v in releases]
        lines += ["", f"## {title}", "", "| feature | " + " | ".join(head) + " |",
                  "| --- |" + " --- |" * len(releases)]
        for i, status in enumerate(table[releases[0]]):
            cells = ["yes" if table[v][i].available else "no" for v in releases]
            lines.append(f"| {status.feature} | " + " | ".join(cells) + " |")
        for name, spec, otherwise in CAPABILITIES[engine]:
            cells = ["yes" if _in(v, spec) else "no*" for v in releases]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines += [""] + [f"\\* {name}: where not, {otherwise}." for name, spec, otherwise in CAPABILITIES[engine]]
        lines += ["", "Patches applied on each tested release:", ""]
        from .patches import ALL_PATCHES

        for v in releases:
            names = [p.name for p in ALL_PATCHES if p.engine == engine and p.supports(v)]
            lines.append(f"- {v}: " + ", ".join(f"`{n}`" for n in names))
        lines += ["", "How to configure profiling:", ""]
        for spec, text in HOW_TO_CONFIGURE[engine]:
            lines.append(f"- {title} `{spec or 'newer'}`: {text}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
