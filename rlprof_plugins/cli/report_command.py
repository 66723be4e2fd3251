"""``rlprof report ROOT``: the step report, one offline HTML page (and JSON, CSV) over every step below ROOT.

ROOT may hold one server's steps or a whole fleet's: verl's replica folders,
a folder per server (``rlprof collect``), or servers sharing one directory;
each replica is then shown beside the others (``report.fleet``).

Exit codes: 0 every step found was read; 1 nothing to report (no step
folder, no trace, no engine iteration, no step in ``--steps``: an empty root
writes nothing), or a step or one of its rank files could not be read, or
it failed: the page is written and names each such step; 2 arguments that
cannot go together (``--compare 4 4``, ``--steps 5-3``, a ``--compare``
step outside ``--steps``, a ``--replica`` that names none).
"""

from __future__ import annotations

import argparse

import re
import sys
from pathlib import Path

from .._command import Command
from .common import EXIT_FAILED, EXIT_OK, CliError, UsageError, progress_of, reap_folder

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def step_range(text: str) -> tuple[int, int]:
    """``37`` or ``30-40``."""
    m = _RANGE.match(text.strip())
    if not m:
        raise UsageError(f"--steps: {text!r} is not N or A-B")
    first, last = int(m[1]), int(m[2] or m[1])
    if last < first:
        raise UsageError(f"--steps: {text!r} ends before it starts")
    return first, last


def cmd_report(args) -> int:
    from ..report.build import NoSuchReplica, build, write_csv, write_json, write_page
    from ..trace.format.codec import gc_paused

    root = Path(args.root)
    if not root.is_dir():
        raise CliError(f"{root}: no such directory")
    reap_folder(root)
    steps = step_range(args.steps) if args.steps else None
    pair = tuple(args.compare) if args.compare else None
    if pair and pair[0] == pair[1]:
        raise UsageError(f"--compare: two different steps, not {pair[0]} and {pair[1]}")
    if pair and steps and not all(steps[0] <= s <= steps[1] for s in pair):
        raise UsageError(f"--compare {pair[0]} {pair[1]}: outside --steps {args.steps} (widen --steps, or leave it)")
    # the report's rows and a fleet's briefs are tens of thousands of small objects without cycles: the
    # cycle collector, run every few hundred of them over an ever larger heap, would take most of the time;
    # they are let go before it runs again (else its first pass walks them all)
    with gc_paused():
        progress = progress_of(args)
        try:
            built = build(root, steps=steps, pair=pair, use_cache=not args.no_cache, progress=progress,
                          replica=args.replica, every_number=bool(args.json or args.csv))
        except NoSuchReplica as e:
            raise UsageError(str(e)) from None
        finally:
            if progress is not None:
                progress.close()
        if not built.report["steps_found"]:
            raise CliError(f"nothing to report: {root} holds no global_step_N folder and no trace (nothing written)")
        out = Path(args.output) if args.output else root / "report.html"
        write_page(built, out)
        written = [out]
        if args.json:
            write_json(built, Path(args.json))
            written.append(Path(args.json))
        if args.csv:
            written += write_csv(built, Path(args.csv))
        notes, cache, count = built.notes, built.cache, len(built.report["steps"])
        failed = built.nothing or bool(built.unread)
        del built
    for note in notes:
        print(f"rlprof: {note}", file=sys.stderr)
    print(f"wrote {', '.join(map(str, written))} ({count} step(s); "
          f"{cache.hits} from the cache, {cache.misses} read)" if cache and cache.enabled else
          f"wrote {', '.join(map(str, written))} ({count} step(s))")
    return EXIT_FAILED if failed else EXIT_OK


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("root", help="the trace root holding global_step_N folders (one server's, or a fleet's: "
                                "replica folders, servers sharing it), or one step folder")
    p.add_argument("-o", "--output", help="the page to write (default: ROOT/report.html)")
    p.add_argument("--steps", metavar="A-B", help="only these global steps (N or A-B; must hold --compare's)")
    p.add_argument("--compare", nargs=2, type=int, metavar=("S1", "S2"),
                   help="two different steps side by side: stages, then operators and kernels sorted by the "
                        "change of their time per iteration")
    p.add_argument("--replica", metavar="NAME",
                   help="only this replica (server) of a fleet's output: its folder name or server name")
    p.add_argument("--json", metavar="FILE", help="also write the numbers as JSON")
    p.add_argument("--csv", metavar="DIR", help="also write the numbers as CSV files in DIR")
    p.add_argument("--no-cache", action="store_true",
                   help="read every step again (default: reuse ROOT/.rlprof-report-cache for unchanged steps)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")


REPORT = Command("report", "the step report: one offline HTML page comparing every global step "
                                      "(iteration times by stage, ranks, operators); also JSON and CSV", _arguments, cmd_report)
