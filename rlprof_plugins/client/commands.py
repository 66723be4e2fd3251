"""``rlprof start|stop|status|collect``: the client's actions from a shell.

Each prints one row per server (ok or the reason it failed) and exits 1 when
any server failed, 2 on bad usage, so a shell script or a job scheduler can
tell a partial profile from a complete one.
"""

from __future__ import annotations

import argparse
import json
import sys

from .._command import Command
from .discovery import Server
from .http import API_KEY_ENV, ROUTER_API_KEY_ENV
from .profiler import RolloutProfiler
from .results import FleetResult

EXIT_OK, EXIT_FAILED = 0, 1


def render(result: FleetResult) -> str:
    """A per-server table and a closing line, for one action."""
    show_role = any(r.role for r in result.results)
    header = ["SERVER"] + (["ROLE"] if show_role else []) + ["RESULT", "STATE", "STEP", "DETAIL"]
    rows = [header]
    for r in result.results:
        detail = (r.directory or "") if r.ok else (r.error or "")
        if r.ok and r.files:
            detail += f" ({len(r.files)} file{'s' * (len(r.files) != 1)})"
        rows.append([r.url] + ([r.role or "-"] if show_role else []) +
                    ["ok" if r.ok else "FAILED", r.state or "-", "-" if r.global_step is None else str(r.global_step),
                     detail])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1] for row in rows]
    step = "" if result.global_step is None else f" global step {result.global_step}"
    if result.error:
        lines.append(f"error: {result.error}")
    lines.append(f"{result.action}{step}: {len(result.succeeded)} of {len(result.results)} server(s) ok")
    return "\n".join(lines)


WAIT_TIMEOUT_S = 600.0  # --timeout's default: what --wait waits at most


def _urls(args) -> list[str]:
    """``--url`` as given: repeated, comma-separated, or both."""
    return [u for given in args.url or [] for u in given.split(",") if u.strip()]


def _profiler(args) -> RolloutProfiler:
    return RolloutProfiler(_urls(args), router=args.router, api_key=args.api_key, router_api_key=args.router_api_key,
                           request_timeout=args.request_timeout,
                           wait_timeout=getattr(args, "timeout", WAIT_TIMEOUT_S))  # ``step`` does not wait


def _finish(args, results: list[FleetResult]) -> int:
    if args.json:
        print(json.dumps({"ok": all(r.ok for r in results), "actions": [r.to_json() for r in results]}, indent=2))
    else:
        print("\n\n".join(render(r) for r in results))
    return EXIT_OK if all(r.ok for r in results) else EXIT_FAILED


def cmd_start(args) -> int:
    profiler = _profiler(args)
    results = [profiler.start(args.global_step, step_start=args.step_start, step_end=args.step_end,
                              by_stage=args.by_stage)]
    if args.wait and results[0].succeeded:
        results.append(profiler.wait(args.global_step, servers=_answered(results[0])))
    return _finish(args, results)


def _answered(result: FleetResult) -> list[Server]:
    """The servers that succeeded, keeping the router's role for the next table."""
    return [Server(r.url, r.role) for r in result.succeeded]


def cmd_stop(args) -> int:
    profiler = _profiler(args)
    results = [profiler.stop()]
    if args.wait and results[0].succeeded:
        results.append(profiler.wait(args.global_step, servers=_answered(results[0])))
    return _finish(args, results)


def cmd_status(args) -> int:
    profiler = _profiler(args)
    result = profiler.wait(args.global_step) if args.wait else profiler.status(args.global_step)
    return _finish(args, [result])


def cmd_step(args) -> int:
    return _finish(args, [_profiler(args).mark_step(args.step)])


def cmd_dump(args) -> int:
    return _finish(args, [_profiler(args).flight_dump()])


def cmd_collect(args) -> int:
    import os

    from .collect import CollectError, collect

    urls = _urls(args)
    if len(urls) != 1:
        print("rlprof: error: collect: give one server (--url URL): the one whose ranks span the nodes",
              file=sys.stderr)
        return EXIT_FAILED
    try:
        got = collect(urls[0], args.global_step, args.output, api_key=args.api_key or os.environ.get(API_KEY_ENV),
                      timeout=args.request_timeout)
    except CollectError as e:
        print(f"rlprof: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    nodes = ", ".join(f"node {n.get('node')} ({n.get('host')}: {len(n.get('ranks', []))} ranks)" for n in got.nodes)
    print(json.dumps(got.to_json(), indent=2) if args.json else
          f"collected {len(got.files)} files ({got.bytes / 1e6:.1f} MB) of global step {args.global_step} from "
          f"{nodes} into {got.directory}\nnext: rlprof merge {got.directory}")
    return EXIT_OK


def _step(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return value


def _common(p: argparse.ArgumentParser) -> None:
    where = p.add_argument_group("servers (one of them, or both)")
    where.add_argument("--url", action="append", metavar="URL",
                       help="a rollout server (repeat, or comma-separate, for several)")
    where.add_argument("--router", metavar="URL",
                       help="a router (sglang-router, vllm-router, ...): every worker it lists")
    p.add_argument("--api-key", help=f"the servers' API key (default: ${API_KEY_ENV})")
    p.add_argument("--router-api-key", help=f"the router's key for its worker list "
                                            f"(default: ${ROUTER_API_KEY_ENV}, else the servers' key)")
    p.add_argument("--request-timeout", type=float, default=30.0,
                   help="seconds one server has to answer (default 30)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _start_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("--global-step", type=_step, required=True, help="the RL global step: global_step_<N>/ folders")
    p.add_argument("--step-start", type=_step, help="first engine iteration recorded (default: the server's)")
    p.add_argument("--step-end", type=_step, help="engine iteration the window ends before (default: the server's)")
    p.add_argument("--by-stage", action=argparse.BooleanOptionalAction, default=None,
                   help="one trace per stage (prefill/decode)")
    p.add_argument("--wait", action="store_true", help="then wait until every server has written its files "
                                                       "(needs a window: --step-end or the server's)")
    _wait_timeout(p)


def _stop_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("--wait", action="store_true", help="then wait until every server has written its files")
    p.add_argument("--global-step", type=_step, help="with --wait: the step to wait for (default: the last session)")
    _wait_timeout(p)


def _status_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("--global-step", type=_step, help="that step's session (default: the current or last one)")
    p.add_argument("--wait", action="store_true", help="wait until every session is done or failed")
    _wait_timeout(p)


def _step_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("step", type=_step, help="the RL global step the servers' step metrics count from now on")
    _common(p)


def _collect_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("--global-step", type=_step, required=True, help="the step to collect")
    p.add_argument("-o", "--output", required=True, help="where global_step_<N>/ is written")
    # Accepted as before (every fleet command took it), so command lines written for it still parse.
    p.add_argument("--timeout", type=float, default=WAIT_TIMEOUT_S, help="unused: collect does not wait")


def _wait_timeout(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timeout", type=float, default=WAIT_TIMEOUT_S, help="seconds --wait waits at most (default 600)")


# ``start``, ``stop``, ``status``, ``step``, ``dump`` and ``collect`` on the ``rlprof`` command line.
COMMANDS = (
    Command("start", "start profiling a global step on every server (exit 1 if any failed)", _start_arguments,
            cmd_start),
    Command("stop", "stop the running session on every server (exit 1 if any failed)", _stop_arguments, cmd_stop),
    Command("status", "every server's profiling session (exit 1 if any failed)", _status_arguments, cmd_status),
    Command("step", "mark the RL global step on every server: its step metrics count iterations for it from "
                    "now on (exit 1 if any failed)", _step_arguments, cmd_step),
    Command("dump", "every server's flight recorder writes its last minute now, below each rank's current step's "
                    "flight/ (exit 1 if any failed)", _common, cmd_dump),
    Command("collect", "one step's files from a server, from every node its ranks ran on, into one folder "
                       "(then rlprof merge)", _collect_arguments, cmd_collect),
)


def check_usage(parser: argparse.ArgumentParser, args) -> None:
    """Exit 2 (argparse's usage error) when no server was named."""
    if getattr(args, "func", None) in (cmd_start, cmd_stop, cmd_status, cmd_step, cmd_dump, cmd_collect) and not (args.url or args.router):
        parser.error(f"{args.command}: give --url URL (one or more) or --router URL")
