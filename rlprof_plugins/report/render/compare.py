"""``rlprof report --compare S1 S2``: two steps side by side, operators by their change per iteration.

Every operator either step recorded is compared per iteration of its stage (totals grow with the window),
``new`` or ``gone`` where only one step has it, sorted by the absolute change: the question is what grew.
"""

from __future__ import annotations

from typing import Any

from ...trace.analysis.step_numbers import BETWEEN, change_pct, operator_changes

COMPARED = 30  # operators of each kind in the comparison


def compare(report: dict[str, Any], first: int, second: int) -> dict[str, Any]:
    """``{"steps": [a, b], "stages": [...], "operators": {"device": [...], "cpu": [...]}, "step": {...}}``;
    ``ValueError`` naming a step the report does not hold."""
    rows = {row["global_step"]: row for row in report["steps"]}
    for step in (first, second):
        if step not in rows:
            raise ValueError(f"--compare: no step {step} in {report['root']} "
                             f"(steps: {', '.join(str(s) for s in report['steps_found']) or 'none'})")
    a, b = rows[first], rows[second]
    stages = []
    for stage in sorted(set(a["stages"]) | set(b["stages"])):
        sa, sb = a["stages"].get(stage, {}), b["stages"].get(stage, {})
        stages.append({"stage": stage, **{f"{k}_{side}": s.get(k) for side, s in (("a", sa), ("b", sb))
                                          for k in ("iterations", "mean_ms", "p90_ms", "mean_batch")},
                       "mean_ms_change_pct": change_pct(sa.get("mean_ms"), sb.get("mean_ms"))})
    counts = [{s: n["iterations"] for s, n in row["stages"].items()} for row in (a, b)]
    changes = operator_changes(b.get("_stage_ops", {}), counts[1], a.get("_stage_ops", {}), counts[0],
                               n=1 << 30, gone=1 << 30)
    operators = {}
    for kind, ops in changes.items():
        both = [{"name": o["name"], "stage": o["stage"], "a_ms": o["before_ms"], "b_ms": o["ms"],
                 "a_iterations": o["before_iterations"], "b_iterations": o["iterations"],
                 "a_per_iteration_ms": o["before_per_iteration_ms"], "b_per_iteration_ms": o["per_iteration_ms"],
                 "change_per_iteration_ms": None if o["per_iteration_ms"] is None
                 else round(o["per_iteration_ms"] - (o["before_per_iteration_ms"] or 0.0), 4),
                 "change_pct": o["change_pct"], "status": o["status"]}
                for o in ops if o["stage"] != BETWEEN]
        operators[kind] = sorted(both, key=lambda o: (-abs(o["change_per_iteration_ms"] or 0.0), o["name"]))[:COMPARED]
    return {"steps": [first, second], "stages": stages, "operators": operators,
            "step": {"a_mean_ms": a["mean_ms"], "b_mean_ms": b["mean_ms"],
                     "change_pct": change_pct(a["mean_ms"], b["mean_ms"])}}
