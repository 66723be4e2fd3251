"""The ``rlprof`` command: work on trace folders after (or while) a run.

    rlprof merge STEP_DIR [-o OUT]          one trace per step (per stage) from every rank
    rlprof merge FILE FILE ... -o OUT       the given rank traces, in this order
    rlprof split-stages TRACE [-o DIR]      per-stage traces from iteration annotations
    rlprof summary DIR [--json]             where each step's time went, step over step
    rlprof check TRACE ... [--json]         validate traces against the Trace Event Format rules
    rlprof stitch CHUNK ... -o OUT          one rank's chunk traces (a chunked session) as one trace
    rlprof doctor [--engine E] [--json]     what rlprof can do with the installed engine, and how to set it up
    rlprof npu-analyse DIR                  run torch_npu's analysis on *_ascend_pt folders not analysed yet
    rlprof start|stop|status --url U | --router R [--global-step N ...]
                                            profile a global step on every rollout server (rlprof_plugins.client)

Exit codes: 0 success; 1 a file is missing, unreadable or invalid (named on
stderr; nothing partial is left behind), or a server failed (start/stop/status);
2 bad command-line usage.
Progress goes to stderr (``--quiet`` silences it), results to stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable

from . import __version__

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class CliError(Exception):
    """A user-facing failure: message printed, exit code 1."""


def _progress(args) -> Callable[[str], None] | None:
    if getattr(args, "quiet", False):
        return None
    return lambda message: print(message, file=sys.stderr, flush=True)


def _reap(root: Path) -> None:
    """Writers whose process is gone leave their step ``exporting`` for good:
    mark them failed (same machine only) before reading the folder."""
    from .writers import reap_all

    for folder, names in reap_all(root).items():
        print(f"rlprof: {folder}: {', '.join(names)} marked failed: the writing process is gone", file=sys.stderr)


def _emit(args, data: dict, text: str) -> None:
    print(json.dumps(data, indent=2) if getattr(args, "json", False) else text)


# ---- merge ------------------------------------------------------------------
def cmd_merge(args) -> int:
    from .trace.merge import merge
    from .trace.naming import rank_label
    from .trace.sources import MergeGroup, RankFile, plan

    paths = [Path(p) for p in args.paths]
    for p in paths:
        if not p.exists():
            raise CliError(f"{p}: no such file or directory")
    if len(paths) == 1 and paths[0].is_dir():
        _reap(paths[0])
        pl = plan(paths[0])
        groups, unplaced = pl.groups, pl.unplaced
        if args.output and len(groups) > 1:
            raise CliError(f"{paths[0]}: {len(groups)} merges ({', '.join(g.output.name for g in groups)}); "
                           "-o needs exactly one")
    else:
        if any(p.is_dir() for p in paths):
            raise CliError("give one step folder, or trace files")
        if not args.output:
            raise CliError("merging files needs -o OUT")
        inputs = [RankFile(p, rank_label(k), "worker", (0, k)) for k, p in enumerate(paths)]
        groups, unplaced = [MergeGroup(paths[0].parent, None, inputs)], []
    if args.jobs is not None and args.jobs < 1:
        raise CliError("--jobs: at least 1")
    progress = _progress(args)
    for path, why in unplaced:
        print(f"rlprof: not merged: {path}: {why}", file=sys.stderr)
    if not groups or not any(g.inputs for g in groups):
        raise CliError(f"{paths[0]}: no rank traces found to merge")
    results = []
    for g in groups:
        out = Path(args.output) if args.output else g.output
        r = merge(g, out, progress=progress, compresslevel=args.level, jobs=args.jobs)
        results.append({"output": str(r.output), "stage": g.stage, "events": r.events, "seconds": round(r.seconds, 3),
                        "ranks": [{"label": s.label, "source": s.source, "events": s.events} for s in r.ranks]})
    text = "\n".join(f"wrote {m['output']} ({len(m['ranks'])} traces, {m['events']:,} events, {m['seconds']:.1f} s)"
                     for m in results)
    _emit(args, {"merged": results, "unplaced": [{"path": str(p), "reason": w} for p, w in unplaced]}, text)
    return EXIT_OK


# ---- split-stages -------------------------------------------------------------
def _base_name(trace: Path) -> str:
    name = trace.name
    for suffix in (".pt.trace.json.gz", ".pt.trace.json", ".trace.json.gz", ".trace.json", ".json.gz", ".json"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def cmd_split(args) -> int:
    from .trace.stage_split import split_file

    trace = Path(args.trace)
    if not trace.is_file():
        raise CliError(f"{trace}: no such file")
    out_dir = args.output_dir or str(trace.parent)  # "{stage}" in it: one folder per stage
    progress = _progress(args)
    if progress:
        progress(f"splitting {trace} by stage")
    try:
        written = split_file(trace, out_dir, _base_name(trace), gzip=not args.no_gzip, progress=progress)
    except ValueError as e:  # includes TraceFormatError
        raise CliError(str(e) if str(trace) in str(e) else f"{trace}: {e}") from None
    _emit(args, {"files": [{"stage": s, "path": str(p)} for s, p in written]},
          "\n".join(f"wrote {p} ({s})" for s, p in written))
    return EXIT_OK


# ---- summary --------------------------------------------------------------------
def cmd_summary(args) -> int:
    from .trace.summary import render_table, summarise

    root = Path(args.dir)
    if not root.is_dir():
        raise CliError(f"{root}: no such directory")
    _reap(root)
    data = summarise(root, progress=_progress(args))
    if not any(step["stages"] for step in data["steps"]):
        raise CliError(f"{root}: no rank traces found")
    _emit(args, data, render_table(data))
    return EXIT_OK


# ---- check --------------------------------------------------------------------------
def cmd_check(args) -> int:
    from .trace.check import check

    reports = [check(p) for p in args.traces]
    lines = []
    for r in reports:
        lines.append(f"{'ok  ' if r.ok else 'FAIL'} {r.path}: {r.events:,} events, {r.ranks} rank(s), {r.flows} flows, "
                     f"{r.error_count} error(s), {r.warning_count} warning(s)")
        lines += [f"  error: {m}" for m in r.errors] + [f"  warning: {m}" for m in r.warnings[:10]]
    _emit(args, {"reports": [r.to_json() for r in reports]}, "\n".join(lines))
    return EXIT_OK if all(r.ok for r in reports) else EXIT_FAILED


# ---- doctor --------------------------------------------------------------------------
def cmd_doctor(args) -> int:
    from .doctor import ENGINES, diagnose_all, header, render

    reports = diagnose_all([args.engine] if args.engine else list(ENGINES), dry_run=not args.no_import)
    found = [r for r in reports if r.installed]
    _emit(args, {"engines": [r.to_json() for r in reports]}, "\n".join([header()] + [render(r) for r in reports]))
    if not found:
        print("rlprof: error: no supported engine (vllm, sglang) is installed in this environment", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK if all(r.ok for r in found) else EXIT_FAILED


# ---- stitch -------------------------------------------------------------------------
def cmd_stitch(args) -> int:
    from .trace.stitch import stitch

    chunks = [Path(p) for p in args.chunks]
    for p in chunks:
        if not p.is_file():
            raise CliError(f"{p}: no such file")
    progress = _progress(args)
    if progress:
        progress(f"stitching {len(chunks)} chunks into {args.output}")
    result = stitch(chunks, Path(args.output))
    _emit(args, {"output": str(result.output), "events": result.events, "chunks": result.chunks},
          f"wrote {result.output}: {result.events:,} events from {result.chunks} chunks")
    return EXIT_OK


# ---- npu-analyse ---------------------------------------------------------------------
def cmd_npu_analyse(args) -> int:
    import importlib.util

    from .backends.npu_profiler import analyse_in_subprocess
    from .trace.naming import ASCEND_SUFFIX, trace_view_of

    root = Path(args.dir)
    if not root.is_dir():
        raise CliError(f"{root}: not a directory")
    found = sorted({p for pattern in ("", "*/", "*/*/") for p in root.glob(f"{pattern}*{ASCEND_SUFFIX}")
                    if p.is_dir()} | ({root} if root.name.endswith(ASCEND_SUFFIX) else set()))
    if not found:
        raise CliError(f"{root}: no *{ASCEND_SUFFIX} folders (torch_npu output) found")
    todo = [p for p in found if not trace_view_of(p).exists()]
    if todo and importlib.util.find_spec("torch_npu") is None:
        raise CliError(f"{len(todo)} folder(s) need torch_npu's analysis, and torch_npu is not installed here; "
                       "run this where it is")
    progress = _progress(args)
    for p in todo:
        if progress:
            progress(f"analysing {p}")
        try:
            analyse_in_subprocess(p)
        except RuntimeError as e:
            raise CliError(str(e)) from None
    data = {"analysed": [str(p) for p in todo], "already_analysed": [str(p) for p in found if p not in todo]}
    _emit(args, data, f"analysed {len(todo)}, already analysed {len(found) - len(todo)}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlprof", description="rlprof trace tools (merge, split, summarise, check), "
                                                                  "the engine diagnosis (doctor) and fleet control "
                                                                  "(start, stop, status)")
    parser.add_argument("--version", action="version", version=f"rlprof-plugins {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("merge", help="merge the rank traces of a step into one trace")
    p.add_argument("paths", nargs="+", help="a step folder, or trace files (then -o is required)")
    p.add_argument("-o", "--output", help="output file (default: <dir>/merged[.<stage>].pt.trace.json.gz)")
    p.add_argument("--level", type=int, default=3, choices=range(1, 10), metavar="1-9",
                   help="gzip level of the output (default 3)")
    p.add_argument("-j", "--jobs", type=int, default=None, metavar="N",
                   help="processes (default: one per trace, up to the usable cores, for inputs over 4 MB)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=cmd_merge)

    p = sub.add_parser("split-stages", help="split a trace into prefill/decode traces")
    p.add_argument("trace")
    p.add_argument("-o", "--output-dir", help="where to write (default: beside the trace; {stage} in it: a folder "
                                            "per stage, as step folders keep them)")
    p.add_argument("--no-gzip", action="store_true", help="write plain JSON")
    p.add_argument("--json", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=cmd_split)

    p = sub.add_parser("summary", help="per step and stage: wall time, busiest operators, rank imbalance")
    p.add_argument("dir", help="a global_step_N folder, or the trace root holding them")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=cmd_summary)

    p = sub.add_parser("check", help="validate traces (exit 1 on any error)")
    p.add_argument("traces", nargs="+")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("stitch", help="join one rank's chunk traces (a chunked session) into one trace")
    p.add_argument("chunks", nargs="+", help="the chunk traces, in recording order")
    p.add_argument("-o", "--output", required=True, help="the trace to write (gzip when it ends in .gz)")
    p.add_argument("--json", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=cmd_stitch)

    p = sub.add_parser("doctor", help="the installed engine: version, features, patches, how to configure "
                                      "(exit 1 if a patch declared for it fails)")
    p.add_argument("--engine", choices=("vllm", "sglang"), help="only this engine (default: every one installed)")
    p.add_argument("--no-import", action="store_true", help="do not import the engine's modules (no dry run)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("npu-analyse", help="run torch_npu's analysis on *_ascend_pt folders (then merge/summary)")
    p.add_argument("dir", help="a *_ascend_pt folder, a step folder, or the trace root")
    p.add_argument("--json", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true")
    p.set_defaults(func=cmd_npu_analyse)

    from .client.cli import add_parsers

    add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from .client.cli import check_usage

    check_usage(parser, args)
    try:
        return args.func(args)
    except CliError as e:
        print(f"rlprof: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except (OSError, ValueError) as e:  # TraceFormatError names its file
        print(f"rlprof: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
