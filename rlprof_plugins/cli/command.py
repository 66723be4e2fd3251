"""The ``rlprof`` command: work on trace folders after (or while) a run.

    rlprof merge STEP_DIR [-o OUT]          one trace per step (per stage) from every rank
    rlprof merge FILE FILE ... -o OUT       the given rank traces, in this order
    rlprof split-stages TRACE [-o DIR]      per-stage traces from iteration annotations
    rlprof summary DIR [--json]             where each step's time went, step over step
    rlprof report ROOT [-o PAGE]            one offline HTML page comparing every global step (also --json, --csv)
    rlprof check TRACE ... [--json]         validate traces against the Trace Event Format rules
    rlprof stitch CHUNK ... -o OUT          one rank's chunk traces (a chunked session) as one trace
    rlprof doctor [--engine E] [--json]     what rlprof can do with the installed engine (and verl), and how to set it up
    rlprof npu-analyse DIR                  run torch_npu's analysis on *_ascend_pt folders not analysed yet
    rlprof start|stop|status --url U | --router R [--global-step N ...]
                                            profile a global step on every rollout server (rlprof_plugins.client)
    rlprof collect --url U --global-step N -o DIR
                                            one step's files from every node its ranks ran on

Exit codes: 0 success; 1 a file is missing, unreadable or invalid (named on
stderr; nothing partial is left behind), a server failed (start/stop/status/
collect), ``report`` found nothing to report or a step it could not read, or
with ``--strict`` a rank the step has is missing (merge, summary:
always a warning naming it); 2 bad command-line usage.
Progress goes to stderr (``--quiet`` silences it), results to stdout.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from .. import __version__
from ..patches.engines import ENGINES, TRAINERS
from .common import (EXIT_FAILED, EXIT_OK, EXIT_USAGE, CliError, UsageError, emit, finish_kept, progress_of,
                     recovered_line)
from .._command import Command
from . import trace_commands


# ---- doctor --------------------------------------------------------------------------
def cmd_doctor(args) -> int:
    from . import installation

    whole = installation.check()
    if not whole.ok:  # the report below imports the same registry: name what is missing instead
        emit(args, {"installation": whole.to_json(), "engines": [], "trainers": []},
             "\n".join([f"rlprof-plugins {__version__} doctor", whole.render()]))
        return EXIT_FAILED
    from .doctor import ENGINES, diagnose_all, header, printing_to_stderr, render
    from .doctor_trainers import TRAINERS, diagnose_trainer, render_trainer

    picked = [args.engine] if args.engine else [*ENGINES, *TRAINERS]
    reports = diagnose_all([e for e in picked if e in ENGINES], dry_run=not args.no_import)
    trainers = printing_to_stderr(lambda: [diagnose_trainer(t, dry_run=not args.no_import)
                                           for t in picked if t in TRAINERS])
    found = [r for r in [*reports, *trainers] if r.installed]
    emit(args, {"installation": whole.to_json(), "engines": [r.to_json() for r in reports],
                "trainers": [r.to_json() for r in trainers]},
         "\n".join([header(), whole.render()] + [render(r) for r in reports] + [render_trainer(r) for r in trainers]))
    if args.engine in TRAINERS and not found:
        print(f"rlprof: error: {args.engine} is not installed in this environment", file=sys.stderr)
        return EXIT_FAILED
    if not [r for r in reports if r.installed] and args.engine not in TRAINERS:
        print("rlprof: error: no supported engine (vllm, sglang) is installed in this environment", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK if all(r.ok for r in found) else EXIT_FAILED


def _doctor_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", choices=[*ENGINES, *TRAINERS],
                   help="only this engine, or trainer (verl); default: every one installed")
    p.add_argument("--no-import", action="store_true", help="do not import the engine's modules (no dry run)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


# ---- npu-analyse ---------------------------------------------------------------------
def cmd_npu_analyse(args) -> int:
    import importlib.util

    from ..backends.npu_profiler import analyse_in_subprocess
    from ..store.recovery import Output
    from ..trace.format.naming import ASCEND_SUFFIX, trace_view_of

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
    progress = progress_of(args)
    for p in todo:
        if progress:
            progress(f"analysing {p}")
        try:
            analyse_in_subprocess(p)
        except RuntimeError as e:
            raise CliError(str(e)) from None
    recovered = finish_kept(found, [Output(p, "npu_profile") for p in found], args.command_line)
    data = {"analysed": [str(p) for p in todo], "already_analysed": [str(p) for p in found if p not in todo],
            "recovered": recovered}
    emit(args, data, f"analysed {len(todo)}, already analysed {len(found) - len(todo)}" + recovered_line(recovered))
    return EXIT_OK


def _npu_analyse_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", help="a *_ascend_pt folder, a step folder, or the trace root")
    p.add_argument("--json", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true")


def commands() -> tuple[Command, ...]:
    """Every subcommand, in the order ``rlprof --help`` lists them: each declared beside its handler."""
    from ..client.commands import COMMANDS as FLEET
    from .report_command import REPORT
    from .upload_command import UPLOAD

    return (*trace_commands.COMMANDS, REPORT,
            Command("doctor", "the installed engine: version, features, patches, how to configure "
                              "(exit 1 if a patch declared for it fails)", _doctor_arguments, cmd_doctor),
            Command("npu-analyse", "run torch_npu's analysis on *_ascend_pt folders (then merge/summary)",
                    _npu_analyse_arguments, cmd_npu_analyse),
            UPLOAD, *FLEET)


def build_parser() -> argparse.ArgumentParser:
    every = commands()
    parser = argparse.ArgumentParser(prog="rlprof", description="rlprof: trace tools, the step report, the engine "
                                     "diagnosis and fleet control: every command is listed below "
                                     "(rlprof COMMAND --help for its options)")
    parser.add_argument("--version", action="version", version=f"rlprof-plugins {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in every:
        command.add_to(sub)
    return parser


def synopsis() -> str:
    """docs/cli.md's synopsis: every command with every flag, as its parser prints its usage at 100
    columns (``make patch-table`` writes it; a test holds the two equal)."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    usages = []
    for command in sub.choices.values():
        formatter = argparse.HelpFormatter(prog=command.prog, width=100)
        formatter.add_usage(command.usage, command._actions, command._mutually_exclusive_groups)
        usages.append(formatter.format_help().rstrip())
    return "```text\n" + "\n".join(usages) + "\n```\n"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.command_line = shlex.join(["rlprof", *(sys.argv[1:] if argv is None else argv)])
    from ..client.commands import check_usage

    check_usage(parser, args)
    try:
        return args.func(args)
    except UsageError as e:
        print(f"rlprof {args.command}: error: {e} (rlprof {args.command} --help)", file=sys.stderr)
        return EXIT_USAGE
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
