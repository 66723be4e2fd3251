"""The ``rlprof`` trace tools: merge, split-stages, summary, check, stitch.

Each works on folders and files only (no engine, no server); each handler's
arguments sit beside it, declared as one ``Command`` (``COMMANDS``, which
``cli/command.py`` assembles into the command line).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .._command import Command
from .report_command import add_ray_arguments, reading
from .common import (EXIT_FAILED, EXIT_OK, CliError, emit, finish_kept, local_path, progress_of, reap_folder,
                     recovered_line)


# ---- merge ------------------------------------------------------------------
def _merge_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", help="a step folder, or trace files (then -o is required)")
    p.add_argument("-o", "--output", help="output file (default: <dir>/merged[.<stage>].pt.trace.json.gz)")
    p.add_argument("--level", type=int, default=3, choices=range(1, 10), metavar="1-9",
                   help="gzip level of the output (default 3)")
    p.add_argument("-j", "--jobs", type=int, default=None, metavar="N",
                   help="processes (default: one per trace, up to the usable cores, for inputs over 4 MB)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--strict", action="store_true", help="exit 1 when a rank of the step is missing")
    p.add_argument("--align", choices=("auto", "collectives", "clock"), default="auto",
                   help="ranks' clocks: each host's wall clock (clock), the ends of their first collectives "
                        "(collectives), or collectives when the ranks come from more than one host (auto)")


def cmd_merge(args) -> int:
    from ..trace.rewrite.merge import merge
    from ..trace.format.naming import rank_label
    from ..store.step_files import plan
    from ..trace.format.rank_files import MergeGroup, RankFile, missing_line

    paths = [Path(local_path(p, file=len(args.paths) > 1)) for p in args.paths]
    for p in paths:
        if not p.exists():
            raise CliError(f"{p}: no such file or directory")
    if len(paths) == 1 and paths[0].is_dir():
        reap_folder(paths[0])
        pl = plan(paths[0])
        groups, unplaced, assumed = pl.groups, pl.unplaced, pl.assumed
        if args.output and len(groups) > 1:
            raise CliError(f"{paths[0]}: {len(groups)} merges ({', '.join(g.output.name for g in groups)}); "
                           "-o needs exactly one")
    else:
        if any(p.is_dir() for p in paths):
            raise CliError("give one step folder, or trace files")
        if not args.output:
            raise CliError("merging files needs -o OUT")
        inputs = [RankFile(p, rank_label(k), "worker", (0, k)) for k, p in enumerate(paths)]
        groups, unplaced, assumed = [MergeGroup(paths[0].parent, None, inputs)], [], []
    if args.jobs is not None and args.jobs < 1:
        raise CliError("--jobs: at least 1")
    progress = progress_of(args)
    for u in unplaced:
        print(f"rlprof: not merged: {u.path}: {u.reason}", file=sys.stderr)
    for line in assumed:
        print(f"rlprof: {line}", file=sys.stderr)
    missing = [(g.stage or "all", m) for g in groups for m in g.missing]
    _warn_missing([f"{g.directory.name} ({g.stage or 'all'}): {missing_line(g)}" for g in groups if g.missing])
    if not groups or not any(g.inputs for g in groups):
        raise CliError(f"{paths[0]}: no rank traces found to merge")
    results = []
    for g in groups:
        out = Path(args.output) if args.output else g.output
        r = merge(g, out, progress=progress, compresslevel=args.level, jobs=args.jobs, align=args.align)
        results.append({"output": str(r.output), "stage": g.stage, "events": r.events, "seconds": round(r.seconds, 3),
                        "ranks": [{"label": s.label, "source": s.source, "events": s.events} for s in r.ranks]})
    text = "\n".join(f"wrote {m['output']} ({len(m['ranks'])} traces, {m['events']:,} events, {m['seconds']:.1f} s)"
                     for m in results)
    emit(args, {"merged": results, "unplaced": [{"path": str(u.path), "reason": u.reason} for u in unplaced],
                 "missing": [{"stage": s, "rank": m} for s, m in missing]}, text)
    return EXIT_FAILED if args.strict and missing else EXIT_OK


def _warn_missing(lines: list[str]) -> None:
    """Never drop a rank silently: the ranks each step has and its folder lacks, one line a step and stage
    (``rank_files.missing_line``: two ranks of a 128-rank job make one line, not 126)."""
    for line in lines:
        print(f"rlprof: warning: {line} (`rlprof collect` gathers a step spanning nodes)", file=sys.stderr)


# ---- split-stages -------------------------------------------------------------
def _base_name(trace: Path) -> str:
    name = trace.name
    for suffix in (".pt.trace.json.gz", ".pt.trace.json", ".trace.json.gz", ".trace.json", ".json.gz", ".json"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _split_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace")
    p.add_argument("-o", "--output-dir", help="where to write (default: beside the trace; {stage} in it: a folder "
                                            "per stage, as step folders keep them)")
    p.add_argument("--no-gzip", action="store_true", help="write plain JSON")
    p.add_argument("--json", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true")


def cmd_split(args) -> int:
    from ..store.recovery import Output
    from ..trace.rewrite.stage_split import split_file

    trace = Path(local_path(args.trace, file=True))
    if not trace.is_file():
        raise CliError(f"{trace}: no such file")
    out_dir = args.output_dir or str(trace.parent)  # "{stage}" in it: one folder per stage
    progress = progress_of(args)
    if progress:
        progress(f"splitting {trace} by stage")
    try:
        written = split_file(trace, out_dir, _base_name(trace), gzip=not args.no_gzip, progress=progress)
    except ValueError as e:  # includes TraceFormatError
        raise CliError(str(e) if str(trace) in str(e) else f"{trace}: {e}") from None
    recovered = finish_kept([trace], [Output(p, "trace", s) for s, p in written], args.command_line)
    emit(args, {"files": [{"stage": s, "path": str(p)} for s, p in written], "recovered": recovered},
          "\n".join(f"wrote {p} ({s})" for s, p in written) + recovered_line(recovered))
    return EXIT_OK


# ---- summary --------------------------------------------------------------------
def _summary_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", help="a global_step_N folder, or the trace root holding them")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("-q", "--quiet", action="store_true")
    p.add_argument("--strict", action="store_true", help="exit 1 when a rank of a step is missing")
    add_ray_arguments(p)


def cmd_summary(args) -> int:
    from ..report.render.summary import SUMMARY_PLAN, render_table, summary_of

    if args.ray is None:  # an object store's root: read from its local copy
        args.dir = local_path(args.dir)
    root = Path(args.dir)
    if args.ray is None:
        if not root.is_dir():
            raise CliError(f"{root}: no such directory")
        reap_folder(root)
    progress = progress_of(args)
    try:
        with reading(args, args.dir, progress) as where:
            view = where.plan(**SUMMARY_PLAN)
            data = summary_of(view, where.passes(view, use_cache=False), progress)
    finally:
        if progress is not None:
            progress.close()
    data["analysis"] = where.analysis.as_dict()
    for note in where.notes([json.dumps(data["steps"])]):
        print(f"rlprof: {note}", file=sys.stderr)
    if not any(step["stages"] for step in data["steps"]):
        found = [name for step in data["steps"] for name in step["without_iterations"] + step["unreadable"]]
        if not found and not where.session and measured_only(root):
            # what the defaults write where no session ran: the steps are measured, not traced
            print(f"rlprof: {root}: no session recorded a trace here; its steps were measured (step metrics, "
                  f"flight recorder dumps): `rlprof report {root}` shows them", file=sys.stderr)
            emit(args, data, render_table(data))
            return EXIT_FAILED if where.faulty else EXIT_OK
        raise CliError(f"{root}: no engine iteration found" + (
            f" in {', '.join(found)} (no rlprof::iteration, execute_context_*, step[...] or ProfilerStep#N "
            "range; or unreadable)" if found else ": no rank traces"))
    emit(args, data, render_table(data))
    _warn_missing([f"{m['replica'] + ': ' if m.get('replica') else ''}{m['label']} ({m['stage']}): {m['line']}"
                   for m in data["missing"]])
    return EXIT_FAILED if (args.strict and data["missing"]) or where.faulty else EXIT_OK


def measured_only(root: Path) -> bool:
    """Whether ``root`` holds step metrics or flight recorder dumps (what the defaults write with no session)."""
    from ..store.layout import FLIGHT_DIR, STEPS_DIR, step_folders

    folders = [root, *(folder for _, folder in step_folders(root))]
    return any((folder / FLIGHT_DIR).is_dir() for folder in folders) or any((root / STEPS_DIR).glob("*.jsonl"))


# ---- check --------------------------------------------------------------------------
def _check_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("traces", nargs="+")
    p.add_argument("--json", action="store_true")


def cmd_check(args) -> int:
    from ..trace.format.check import check

    reports = [check(p) for p in args.traces]
    lines = []
    for r in reports:
        lines.append(f"{'ok  ' if r.ok else 'FAIL'} {r.path}: {r.events:,} events, {r.ranks} rank(s), {r.flows} flows, "
                     f"{r.error_count} error(s), {r.warning_count} warning(s)")
        lines += [f"  error: {m}" for m in r.errors] + [f"  warning: {m}" for m in r.warnings[:10]]
    emit(args, {"reports": [r.to_json() for r in reports]}, "\n".join(lines))
    return EXIT_OK if all(r.ok for r in reports) else EXIT_FAILED


# ---- stitch -------------------------------------------------------------------------
def _stitch_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("chunks", nargs="+", help="the chunk traces, in recording order")
    p.add_argument("-o", "--output", required=True, help="the trace to write (gzip when it ends in .gz)")
    p.add_argument("--json", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true")


def cmd_stitch(args) -> int:
    from ..store.recovery import Output
    from ..trace.format.pauses import pauses_of, read_pauses
    from ..trace.rewrite.stitch import stitch

    chunks = [Path(p) for p in args.chunks]
    for p in chunks:
        if not p.is_file():
            raise CliError(f"{p}: no such file")
    progress = progress_of(args)
    if progress:
        progress(f"stitching {len(chunks)} chunks into {args.output}")
    # a kept recording's chunks carry their pauses beside them
    pauses = [p for c in chunks for p in (read_pauses(pauses_of(c)) if pauses_of(c).is_file() else [])]
    result = stitch(chunks, Path(args.output), pauses=pauses)
    recovered = finish_kept(chunks, [Output(result.output)], args.command_line, consumed=True)
    if recovered:  # what the exporter removes once stitched
        for chunk in chunks:
            chunk.unlink(missing_ok=True)
            pauses_of(chunk).unlink(missing_ok=True)
    emit(args, {"output": str(result.output), "events": result.events, "chunks": result.chunks,
                "pauses": len(pauses), "recovered": recovered},
          f"wrote {result.output}: {result.events:,} events from {result.chunks} chunks" + recovered_line(recovered))
    return EXIT_OK


COMMANDS = (
    Command("merge", "merge the rank traces of a step into one trace", _merge_arguments, cmd_merge),
    Command("split-stages", "split a trace into prefill/decode traces", _split_arguments, cmd_split),
    Command("summary", "per step and stage: iterations, mean and p90 time, change per iteration, rank imbalance, busiest operators", _summary_arguments,
            cmd_summary),
    Command("check", "validate traces (exit 1 on any error)", _check_arguments, cmd_check),
    Command("stitch", "join one rank's chunk traces (a chunked session) into one trace", _stitch_arguments,
            cmd_stitch),
)
