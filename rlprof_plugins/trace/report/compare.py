"""``rlprof report --compare S1 S2``: two steps side by side, operators sorted by their change.

Every operator either step recorded is compared (not just each step's
busiest), so an operator that appears or vanishes shows as such; the list
is sorted by the absolute change in milliseconds, the question being
"what grew".
"""

from __future__ import annotations

from typing import Any

COMPARED = 30  # operators of each kind in the comparison


def compare(report: dict[str, Any], first: int, second: int) -> dict[str, Any]:
    """``{"steps": [a, b], "stages": [...], "operators": {"device": [...], "cpu": [...]}}``;
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
                       "mean_ms_change_pct": _pct(sa.get("mean_ms"), sb.get("mean_ms"))})
    operators = {}
    for kind in ("device", "cpu"):
        ops_a, ops_b = a["_operator_ms"].get(kind, {}), b["_operator_ms"].get(kind, {})
        both = [{"name": name, "a_ms": ops_a.get(name, 0.0), "b_ms": ops_b.get(name, 0.0),
                 "change_ms": round(ops_b.get(name, 0.0) - ops_a.get(name, 0.0), 3),
                 "change_pct": _pct(ops_a.get(name), ops_b.get(name, 0.0))}
                for name in set(ops_a) | set(ops_b)]
        operators[kind] = sorted(both, key=lambda o: (-abs(o["change_ms"]), o["name"]))[:COMPARED]
    return {"steps": [first, second], "stages": stages, "operators": operators,
            "wall": {"a_ms": a["iteration_ms_total"], "b_ms": b["iteration_ms_total"],
                     "change_pct": _pct(a["iteration_ms_total"], b["iteration_ms_total"])}}


def _pct(before: float | None, now: float | None) -> float | None:
    return round(100.0 * (now - before) / before, 1) if before and now is not None else None
