"""``rlprof summary``: per global step and stage, the iterations and where their time went, as a table or JSON.

Numbered as the report numbers them (``trace.analysis.step_numbers``), with each stage's ranks and
busiest operators per iteration; a trace with no iteration annotation is named, not summarised as empty;
a measured step's rollout tail, RL phases and longest requests are given beside, as the report gives them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ...metrics.phases import longest as longest_phases
from ...step_logs.requests import held_step
from ...metrics.tail import longest_tail
from ...trace.analysis.iteration_names import SOURCE_TITLES, SOURCES
from ...trace.analysis.step_numbers import change_pct, operator_changes, slowest_iterations, stage_numbers, stage_operators
from ..execute.passes import LocalPasses, Passes
from ..plan.planner import plan_root
from ..plan.view import RootView, ServerView

TOP = 10
# ``plan_root``'s arguments for the summary: every step folder's traces, no memory snapshot, no flight
# recorder dump, nothing written below ROOT
SUMMARY_PLAN = dict(memory=False, windows=False, use_cache=False, every_folder=True)


def summarise(root: str | Path, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Every step below ``root``, read on this machine (``summary_of`` a root planned for the summary)."""
    return summary_of(plan_root(Path(root), shown=str(root), **SUMMARY_PLAN), LocalPasses(Path(root), use_cache=False),
                      progress)


def summary_of(view: RootView, passes: Passes, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Every step of a planned root; a fleet's output (several servers' step folders below it: verl's replica
    folders, a folder per server, servers sharing a directory) gives each replica's steps, named. ``passes``
    reads the traces (``report.execute.passes``)."""
    if not view.fleet:
        return _summarise(view, view.servers[0], passes, progress)
    out: dict[str, Any] = {"root": view.root, "steps": [], "unplaced": [], "missing": [], "assumed": [],
                           "replicas": [s.name for s in view.servers]}
    for server in view.servers:
        mine = _summarise(view, server, passes, progress)
        out["steps"] += [{**step, "replica": server.name} for step in mine["steps"]]
        out["unplaced"] += mine["unplaced"]
        for key in ("missing", "assumed"):
            out[key] += [{**m, "replica": server.name} for m in mine[key]]
    out["steps"].sort(key=lambda st: (st["global_step"] is not None, st["global_step"] or 0, st["replica"]))
    return out


def _summarise(view: RootView, server: ServerView, passes: Passes,
               progress: Callable[[str], None] | None) -> dict[str, Any]:
    steps_out, unplaced, missing, assumed = [], [], [], []
    previous: dict[str, float] = {}  # stage -> its mean iteration ms in the last step that had it
    for folder in server.steps:
        global_step, directory = folder.step, view.shown(folder.rel)
        numbers = server.measured.get(global_step) if global_step is not None else None
        unplaced += [{"path": view.shown(path), "reason": reason} for path, reason, role in folder.unplaced
                     if role != "frontend"]  # only worker traces are summarised
        missing += [{"global_step": global_step, "stage": g.stage or "all", "ranks": g.missing,
                     "line": g.missing_line, "label": step_label(global_step, directory)}
                    for g in folder.groups if g.missing]
        assumed += [{"label": step_label(global_step, directory), "rank": a} for a in folder.assumed]
        every = passes.traces(folder.jobs, progress)
        stats = [st for st in every if st.error is None]
        step = {"global_step": global_step, "directory": directory, "stages": [],
                "sources": sorted({st.source for st in stats if st.source}),
                "unreadable": [st.error for st in every if st.error],
                "without_iterations": sorted(st.path.name for st in stats if not st.iteration_list),
                "tail": longest_tail((numbers or {}).get("rollout")) if global_step is not None else None,
                "phases": longest_phases((numbers or {}).get("phases") or {}) if global_step is not None else {},
                "requests": held_step(server.periods, numbers) if global_step is not None else None}
        iterations = slowest_iterations(stats)
        numbers = stage_numbers(iterations, stats)
        counts = {stage: n["iterations"] for stage, n in numbers.items()}
        operators = operator_changes(stage_operators(stats), counts, None, None, n=1 << 30, gone=0)
        for stage, n in numbers.items():
            mine = [st for st in stats if any(it[1] == stage for it in st.iteration_list)]
            step["stages"].append({
                "stage": stage, **n, "change_pct": change_pct(previous.get(stage), n["mean_ms"]),
                "ranks": [{"rank": st.rank, "file": st.path.name,
                           "iterations": sum(1 for it in st.iteration_list if it[1] == stage),
                           "busy_ms": round(sum(it[2] for it in st.iteration_list if it[1] == stage) / 1000.0, 3),
                           "span_ms": round(st.span_us / 1000.0, 3), "profiler_pauses": st.pauses,
                           "profiler_pause_ms": round(st.pause_us / 1000.0, 3),
                           **({"cpu_ops_out_of_order": st.cpu_out_of_order} if st.cpu_out_of_order else {})}
                          for st in mine],
                # the engine waited for these, not for its own work: the longest rank's, apart from its time
                "profiler_pauses": max((st.pauses for st in mine), default=0),
                "profiler_pause_ms": round(max((st.pause_us for st in mine), default=0.0) / 1000.0, 3),
                **{f"top_{kind}_ops": [{k: o[k] for k in ("name", "ms", "per_iteration_ms")}
                                       for o in operators[kind] if o["stage"] == stage][:TOP]
                   for kind in ("device", "cpu")},
            })
            previous[stage] = n["mean_ms"]
        steps_out.append(step)
    return {"root": view.root, "steps": steps_out, "unplaced": unplaced, "missing": missing, "assumed": assumed}


def step_label(global_step: int | None, directory: str | Path) -> str:
    """How a step is named to the reader: ``step 37``, or, for a folder of traces without a global step,
    the folder (``traces in <name> (no global step)``): never ``None``."""
    return f"step {global_step}" if global_step is not None else f"traces in {Path(directory).name} (no global step)"


def render_table(summary: dict[str, Any]) -> str:
    lines = []
    fleet = bool(summary.get("replicas"))
    rows = [(*(("replica",) if fleet else ()), "step", "stage", "iters", "mean ms", "p90 ms", "total ms", "vs prev",
             "ranks", "imbalance", "rlprof pauses", "busiest operator per iteration")]
    for step in summary["steps"]:
        for st in step["stages"]:
            top = (st["top_device_ops"] or st["top_cpu_ops"] or [None])[0]
            change = st["change_pct"]
            rows.append((
                *((step["replica"],) if fleet else ()),
                str(step["global_step"]) if step["global_step"] is not None else Path(step["directory"]).name,
                st["stage"], str(st["iterations"]), f"{st['mean_ms']:.2f}", f"{st['p90_ms']:.2f}",
                f"{st['total_ms']:.1f}", f"{change:+.1f}%" if change is not None else "",
                str(len(st["ranks"])), f"{st['imbalance']:.2f}x" if st["imbalance"] else "-",
                f"{st['profiler_pauses']} ({st['profiler_pause_ms']:.0f} ms)" if st["profiler_pauses"] else "-",
                f"{top['name'][:48]} ({top['per_iteration_ms']:.2f} ms)" if top else "-",
            ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for k, r in enumerate(rows):
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    for step in summary["steps"]:
        label = (f"{step['replica']}: " if fleet else "") + step_label(step["global_step"], step["directory"])
        for st in step["stages"]:
            ops = st["top_device_ops"] or st["top_cpu_ops"]
            kind = "device kernels" if st["top_device_ops"] else "CPU operators (self time)"
            lines += ["", f"{label}, {st['stage']}: busiest {kind} per iteration, all ranks"]
            for op in ops[:5]:
                lines.append(f"  {op['per_iteration_ms']:10.3f} ms  {op['name'][:100]}")
        if tail := step.get("tail"):
            lines.append(f"{label}: the rollout's tail {tail['tail_ms']:,.1f} ms, {tail['share_pct']:g}% of generation "
                         f"({tail['tail_iterations']} iterations after the running batch fell below half of its peak of "
                         f"{tail['peak_batch']}), on {tail['rank']}")
        if held := step.get("requests"):
            r = held[0]
            lines.append(f"{label}: the longest request {r['seconds']:,.2f} s ({r['output_tokens']:,} tokens out, "
                         f"{r['prompt_tokens']:,} in): {r['request_id']}")
        if step.get("phases"):
            lines.append(f"{label}: RL phases " + ", ".join(
                f"{name.replace('_', ' ')} {p['ms']:,.1f} ms ({p['count']}x, on {p['rank']})"
                for name, p in step["phases"].items()))
        if step["sources"] and step["sources"] != ["rlprof"]:
            lines.append(f"{label}: iterations read from " + ", ".join(SOURCE_TITLES[s] for s in step["sources"]))
        for error in step["unreadable"]:
            lines.append(f"unreadable: {label}: {error}")
        for name in step["without_iterations"]:
            names = ", ".join(SOURCE_TITLES[source] for source in SOURCES)
            lines.append(f"{label}: {name} holds no iteration annotation ({names})")
    for u in summary["unplaced"]:
        lines.append(f"not summarised: {u['path']}: {u['reason']}")
    for a in summary.get("assumed", []):
        lines.append(f"{a['replica'] + ': ' if a.get('replica') else ''}{a['label']}: {a['rank']}")
    return "\n".join(lines)
