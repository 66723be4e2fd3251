"""``rlprof report ROOT``: the step report, one offline HTML page (and JSON, CSV) over every step below ROOT.

ROOT may hold one server's steps or a whole fleet's: verl's replica folders,
a folder per server (``rlprof collect``), or servers sharing one directory;
each replica is then shown beside the others (``report.render.fleet``).

Exit codes: 0 every step found was read; 1 nothing to report (no step
folder, no trace, no engine iteration, no step in ``--steps``: an empty root
writes nothing), or a step or one of its rank files could not be read, or
it failed, or (``--ray``) a node could not list ROOT or read a trace: the
page is written and names each such step, file and node; 2 arguments that
cannot go together (``--compare 4 4``, ``--steps 5-3``, a ``--compare``
step outside ``--steps``, a ``--replica`` that names none), or ``--ray``
without Ray installed.

``--ray [ADDRESS]`` reads each trace on the Ray node that holds it
(``report.execute.on_ray``); the numbers are a local run's, and the JSON's
``analysis`` says where the traces were read and what travelled.
"""

from __future__ import annotations

import argparse

import re
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from .._command import Command
from .common import EXIT_FAILED, EXIT_OK, CliError, UsageError, local_path, progress_of, reap_folder

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


class Reading:
    """Where a command reads ROOT: this machine (ROOT a folder here, each step's passes run as it is read), or
    the Ray nodes (``session``: ROOT planned where its files lie, the planned passes run there before the
    report is made)."""

    def __init__(self, root_text: str, session=None) -> None:
        self.root_text, self.session = root_text, session
        self.analysis = session.analysis if session else None

    def plan(self, **how: Any):
        """ROOT's plan (``report.plan.planner.plan_root``, ``how`` its arguments)."""
        if self.session:
            return self.session.plan(**how)
        from ..report.plan.planner import plan_root

        return plan_root(Path(self.root_text), shown=str(Path(self.root_text)), **how)

    def passes(self, view, use_cache: bool = True):
        """The executor of the report's passes; on Ray, every pass ``view`` names runs first."""
        if self.session:
            return self.session.execute(view)
        from ..report.execute.passes import LocalPasses

        passes = LocalPasses(Path(self.root_text), use_cache=use_cache)
        self.analysis = passes.analysis
        return passes

    @property
    def faulty(self) -> bool:
        return bool(self.analysis and self.analysis.faulty)

    def notes(self, said: list[str]) -> list[str]:
        """What the nodes said: faults, other releases, files differing between nodes; and each file not read
        that ``said`` (the report's own notes) does not name already (a fleet's notes are of each step's
        slowest replica)."""
        if not self.session:
            return []
        a, text = self.analysis, "\n".join(said)
        return [*a.faults, *self.session.notes,
                *(f"unread: {u['path']} on node {u['node']}: {u['reason']}" for u in a.unread if u["path"] not in text)]


@contextmanager
def reading(args, root_text: str, progress: Callable[[str], None] | None) -> Iterator[Reading]:
    """``--ray [ADDRESS]``: join the cluster and list ROOT on every node (Ray missing: exit 2, one line);
    else this machine."""
    if args.ray is None:
        yield Reading(root_text)
        return
    from ..report.execute.on_ray.driver import NoCluster, RayMissing, open_session

    try:
        with open_session(root_text, args.ray, timeout=args.timeout, use_cache=not getattr(args, "no_cache", False),
                          progress=progress) as session:
            yield Reading(root_text, session)
    except RayMissing as e:
        raise UsageError(str(e)) from None
    except NoCluster as e:
        raise CliError(str(e)) from None


def add_ray_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ray", nargs="?", const="auto", metavar="ADDRESS",
                   help="read each trace on the Ray node that holds it, only summaries travelling back; ADDRESS "
                        "of the cluster (default: auto, the one this machine belongs to); ROOT is read on each "
                        "node as written there ($VARS expanded there); needs 'rlprof-plugins[ray]'")
    p.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS",
                   help="with --ray: the longest the planning on the nodes, and then the reading, may take; what a node has "
                        "not answered by then is named unread (default: 600)")


def cmd_report(args) -> int:
    from ..report.render.build import build, write_csv, write_json, write_page
    from ..report.execute.passes import PassCache
    from ..report.plan.planner import NoSuchReplica
    from ..trace.format.codec import gc_paused

    steps = step_range(args.steps) if args.steps else None
    if args.ray is None:  # an object store's root: read from its local copy, these steps only
        args.root = local_path(args.root, tuple(args.compare) if args.compare and not steps else steps)
    root = Path(args.root)
    if args.ray is None:
        if not root.is_dir():
            raise CliError(f"{root}: no such directory")
        reap_folder(root)
    elif not args.output and not root.is_dir():
        raise UsageError(f"--ray: {root} is read on the nodes and is no folder here: name the page with -o")
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
            with reading(args, args.root, progress) as where:
                view = where.plan(replica=args.replica, steps=steps, use_cache=not args.no_cache)
                passes = where.passes(view, use_cache=not args.no_cache)
                built = build(view, passes, steps=steps, pair=pair, progress=progress,
                              every_number=bool(args.json or args.csv), root_here=not where.session)
                del view
                if not where.session and not args.no_cache and where.analysis.trace_bytes:
                    kept = PassCache(root)
                    kept.forget_missing(root)  # step folders pruned: so are their traces' passes
                    if (why := kept.unwritable()) and not any(n.startswith("no result cache") for n in built.notes):
                        built.notes.append(f"no result cache: {why}")
                built.notes[:0] = where.notes(built.notes)
                built.analysis = where.analysis.as_dict()
                if not built.report["steps_found"]:
                    raise CliError(f"nothing to report: {root} holds no global_step_N folder and no trace "
                                   "(nothing written)" + "".join(f"; {n}" for n in where.notes([])))
                out = Path(args.output) if args.output else root / "report.html"
                write_page(built, out)
                written = [out]
                if args.json:
                    write_json(built, Path(args.json))
                    written.append(Path(args.json))
                if args.csv:
                    written += write_csv(built, Path(args.csv))
        except NoSuchReplica as e:
            raise UsageError(str(e)) from None
        finally:
            if progress is not None:
                progress.close()
        notes, count = built.notes, len(built.report["steps"])
        failed = built.nothing or bool(built.unread) or where.faulty
        del built
    for note in notes:
        print(f"rlprof: {note}", file=sys.stderr)
    if where.session:
        a = where.analysis
        print(f"wrote {', '.join(map(str, written))} ({count} step(s); {sum(a.traces_per_node.values())} trace(s) "
              f"read on {len(a.nodes)} Ray node(s), {a.node_cache_hits} from their caches; "
              f"{a.bytes_returned:,} bytes came back for {a.trace_bytes:,} bytes of traces)")
        return EXIT_FAILED if failed else EXIT_OK
    a = where.analysis
    read = sum(a.traces_per_node.values())
    print(f"wrote {', '.join(map(str, written))} ({count} step(s); {read} trace(s), "
          f"{a.node_cache_hits} from the cache of passes)" if read and not args.no_cache else
          f"wrote {', '.join(map(str, written))} ({count} step(s))")
    return EXIT_FAILED if failed else EXIT_OK


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("root", help="the trace root holding global_step_N folders (one server's, or a fleet's: "
                                "replica folders, servers sharing it), or one step folder; a folder here or an "
                                "object store URI (s3://bucket/prefix: read from a local copy of what it needs)")
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
    add_ray_arguments(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")


REPORT = Command("report", "the step report: one offline HTML page comparing every global step "
                                      "(iteration times by stage, ranks, operators); also JSON and CSV", _arguments, cmd_report)
