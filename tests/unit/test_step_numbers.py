"""The one definition of a step's numbers (``trace.analysis.step_numbers``) and the iteration names it reads
(``trace.analysis.iteration_names``), on the names the engines write (read from their release wheels: vLLM
0.32 ``Worker.annotate_profile``, SGLang 0.5.23 ``profile_utils.build_step_span_name``) and on
hand-made ranks whose answers are known."""

from types import SimpleNamespace

import pytest

from rlprof_plugins.trace.analysis.iteration_names import iteration_of
from rlprof_plugins.trace.analysis.step_numbers import (ALL, BETWEEN, change_pct, imbalance, operator_changes,
                                               slowest_iterations, stage_label, stage_numbers, straggler)


@pytest.mark.parametrize("name, expected", [
    ("rlprof::iteration 7 [decode] prefill_tokens=0 decode_tokens=4 batch=4", ("rlprof", 7, "decode", 0, 4, 4)),
    ("rlprof::iteration 7", ("rlprof", 7, None, None, None, None)),
    ("execute_context_1(12)_generation_3(3)", ("vllm", None, "prefill", 12, 3, 4)),
    ("execute_context_0(0)_generation_2(2)", ("vllm", None, "decode", 0, 2, 2)),
    ("execute_14_context_1(sq12sk12sqsq144sqsk144)_generation_2(sq2sk40sqsq2sqsk40)",
     ("vllm", None, "prefill", 12, 2, 3)),
    ("step[EXTEND bs=2 toks=24]", ("sglang", None, "prefill", 24, None, 2)),
    ("step[MIXED bs=3 toks=9 forward_id=4]", ("sglang", None, "prefill", 9, None, 3)),
    ("step[DECODE bs=4]", ("sglang", None, "decode", 0, 4, 4)),
    ("step[VERIFY bs=4]", ("sglang", None, "decode", 0, 4, 4)),
    ("ProfilerStep#12", ("torch", 12, None, None, None, None)),
])
def test_iteration_names_of_rlprof_the_engines_and_torch(name, expected):
    assert tuple(iteration_of(name)) == expected


@pytest.mark.parametrize("name", ["step[DRAFT bs=4]", "step[DRAFT_LOOP raw_bs=4 bs=4 topk=1]", "step[IDLE bs=0]",
                                  "execute_model", "aten::mm", "rlprof::iteration x", "ProfilerStep#"])
def test_other_ranges_are_not_iterations(name):
    assert iteration_of(name) is None


def rank(name: str, iterations: list[tuple]) -> SimpleNamespace:
    """A rank's iterations: (index, stage, us, prefill, decode, batch)."""
    return SimpleNamespace(rank=name, iteration_list=[(("", k), *rest) for k, *rest in iterations])


def test_each_iteration_is_its_slowest_ranks_and_stages_say_so():
    r0 = rank("rank0", [(0, "prefill", 900.0, 64, 0, 1), (1, "decode", 200.0, 0, 1, 1), (2, "decode", 100.0, 0, 1, 1)])
    r1 = rank("rank1", [(0, "prefill", 1000.0, 64, 0, 1), (1, "decode", 100.0, 0, 1, 1), (2, "decode", 300.0, 0, 1, 1)])
    its = slowest_iterations([r0, r1])
    assert [(it.key[1], it.us, it.rank) for it in its] == [(0, 1000.0, "rank1"), (1, 200.0, "rank0"),
                                                          (2, 300.0, "rank1")]
    numbers = stage_numbers(its, [r0, r1])
    assert numbers["decode"]["mean_ms"] == 0.25 and numbers["decode"]["total_ms"] == 0.5
    assert numbers["prefill"]["share_pct"] == round(100 * 1000 / 1500, 1)
    assert numbers["decode"]["imbalance"] == 1.333  # rank1 400 us of decode against rank0's 300
    assert straggler(its) == {"rank": "rank1", "share_pct": 66.7}
    assert imbalance({"rank0": 1.0}) is None and change_pct(None, 3.0) is None and change_pct(2.0, 3.0) == 50.0
    assert (stage_label(None, None), stage_label(None, "decode"), stage_label("prefill", "decode")) == (
        ALL, "decode", "prefill")


def test_operator_changes_per_iteration_with_counts_new_and_gone():
    before = {"decode": {"cpu": {"aten::mm": 4.0, "aten::gone": 2.0}, "device": {}},
              BETWEEN: {"cpu": {"idle": 50.0}, "device": {}}}
    now = {"decode": {"cpu": {"aten::mm": 8.0, "aten::new": 1.0}, "device": {}},
           BETWEEN: {"cpu": {"idle": 90.0}, "device": {}}}
    rows = {r["name"]: r for r in operator_changes(now, {"decode": 8}, before, {"decode": 4}, n=10)["cpu"]}
    mm = rows["aten::mm"]  # twice the total over twice the iterations: no change
    assert (mm["ms"], mm["before_ms"], mm["per_iteration_ms"], mm["before_per_iteration_ms"], mm["change_pct"],
            mm["iterations"], mm["before_iterations"], mm["status"]) == (8.0, 4.0, 1.0, 1.0, 0.0, 8, 4, None)
    assert (rows["aten::new"]["status"], rows["aten::new"]["change_pct"]) == ("new", None)
    assert (rows["aten::gone"]["status"], rows["aten::gone"]["change_pct"], rows["aten::gone"]["ms"]) == (
        "gone", -100.0, 0.0)
    assert rows["idle"]["per_iteration_ms"] is None and rows["idle"]["change_pct"] is None  # totals only
    first = {r["name"]: r for r in operator_changes(now, {"decode": 8}, None, None, n=10)["cpu"]}
    assert first["aten::mm"]["status"] is None and "aten::gone" not in first  # nothing before: nothing new


def test_a_stage_one_step_did_not_run_says_so_instead_of_a_blank_change():
    before = {"decode": {"cpu": {"aten::mm": 4.0}, "device": {}},
              "prefill": {"cpu": {"aten::embedding": 3.0}, "device": {}}}
    now = {"decode": {"cpu": {"aten::mm": 4.0, "aten::cat": 1.0}, "device": {}},
           "extend": {"cpu": {"aten::slice": 2.0}, "device": {}}}
    rows = {(r["stage"], r["name"]): r for r in operator_changes(
        now, {"decode": 4, "extend": 2}, before, {"decode": 4, "prefill": 1}, n=10)["cpu"]}
    assert (rows["extend", "aten::slice"]["status"], rows["extend", "aten::slice"]["change_pct"]) == ("stage new", None)
    assert (rows["decode", "aten::cat"]["status"], rows["decode", "aten::mm"]["status"]) == ("new", None)
    gone = rows["prefill", "aten::embedding"]
    assert (gone["status"], gone["change_pct"], gone["per_iteration_ms"], gone["before_per_iteration_ms"]) == (
        "stage gone", -100.0, None, 3.0)
