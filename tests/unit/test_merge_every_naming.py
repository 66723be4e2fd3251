"""``rlprof merge`` on folders without a manifest, in every naming a tested release writes.

A GPU server on vLLM >= 0.17 names its worker traces
``[prefix_]dp0_pp0_tp1_dcp0_ep0_rank1.<ns>.pt.trace.json.gz``; such a folder
used to yield one "merged" file per rank. Each case here writes a TP=2 x
PP=2 step (4 CUDA-shaped rank traces, tests/helpers/synthetic_traces.py)
under one naming, with and without a prefix and per stage, and checks that
the merge writes one trace per stage holding all 4 ranks, which ``rlprof
check`` accepts.
"""

import json

import pytest

from rlprof_plugins.cli import command as cli
from rlprof_plugins.trace.format import naming
from tests.helpers.synthetic_traces import write_rank_trace
from tests.helpers.traces import load_trace

TP, PP = 2, 2
RANKS = [(pp, tp, tp + TP * pp) for pp in range(PP) for tp in range(TP)]


def vllm_suffix(pp, tp, rank):  # get_worker_rank_suffix(global_rank=rank), vLLM >= 0.17
    return f"dp0_pp{pp}_tp{tp}_dcp0_ep0_rank{rank}"


def sglang_native(prefix, pp, tp, stage):
    stage_part = {"prefill": "-EXTEND", "decode": "-DECODE", None: ""}[stage]
    return (f"{prefix}-" if prefix else "") + f"1795353928.61-TP-{tp}-PP-{pp}{stage_part}.trace.json.gz"


NAMINGS = {
    # vLLM >= 0.17 (get_worker_rank_suffix), native and rlprof
    "vllm-suffix": lambda prefix, pp, tp, r, stage: naming.trace_file(
        naming.vllm_worker_name(prefix, vllm_suffix(pp, tp, r)), 1795 + r, stage),
    # rlprof on vLLM < 0.17
    "vllm-rank": lambda prefix, pp, tp, r, stage: naming.trace_file(
        naming.vllm_worker_name(prefix, f"rank{r}"), 1795 + r, stage),
    # native vLLM 0.12-0.16 (no prefix, no stages)
    "vllm-instance": lambda prefix, pp, tp, r, stage: f"a1b2c3d4-rank-{r}.{1795 + r}.pt.trace.json.gz",
    # native vLLM env era: torch's default name, the rank only in the trace header
    "torch-default": lambda prefix, pp, tp, r, stage: f"gpu-node-{r}_{4242 + r}.{1795 + r}.pt.trace.json.gz",
    "sglang": lambda prefix, pp, tp, r, stage: sglang_native(prefix, pp, tp, stage),
    "rlprof-sglang": lambda prefix, pp, tp, r, stage: naming.trace_file(naming.sglang_worker_name(
        prefix, naming.sglang_rank_label({"tp": tp, "tp_size": TP, "pp": pp, "pp_size": PP, "dp": 0, "dp_size": 1,
                                          "ep": 0, "ep_size": 1})), 1795 + r, stage),
}
WITHOUT_PREFIX_OR_STAGES = ("vllm-instance", "torch-default")


def cases():
    for form in NAMINGS:
        for prefix in (None, "rollout"):
            for by_stage in (False, True):
                if form in WITHOUT_PREFIX_OR_STAGES and (prefix or by_stage):
                    continue
                yield pytest.param(form, prefix, by_stage, id=f"{form}-{prefix or 'noprefix'}-"
                                                              f"{'stages' if by_stage else 'whole'}")


@pytest.mark.parametrize("form, prefix, by_stage", list(cases()))
def test_one_merged_trace_per_stage_holds_every_rank(tmp_path, capsys, form, prefix, by_stage):
    stages = ("prefill", "decode") if by_stage else (None,)
    for pp, tp, rank in RANKS:
        for stage in stages:
            write_rank_trace(tmp_path / NAMINGS[form](prefix, pp, tp, rank, stage), rank=rank, iterations=4)
    assert cli.main(["merge", str(tmp_path), "--json", "-q"]) == 0, capsys.readouterr()
    merged = sorted((tmp_path / "merged").glob("merged*.pt.trace.json.gz"))
    assert [naming.parse(p.name).stage for p in merged] == sorted(stages, key=lambda s: s or ""), merged
    for path in merged:
        names = {e["args"]["name"] for e in load_trace(path)["traceEvents"]
                 if e.get("ph") == "M" and e.get("name") == "process_name"}
        labels = {n.split(" ")[0] for n in names}
        assert len(labels) == len(RANKS), (form, sorted(names))
        assert cli.main(["check", str(path), "--json"]) == 0, capsys.readouterr()
    capsys.readouterr()


def test_a_folder_of_two_sessions_merges_each_on_its_own(tmp_path, capsys):
    for prefix in ("a", "b"):
        for pp, tp, rank in RANKS:
            write_rank_trace(tmp_path / NAMINGS["vllm-suffix"](prefix, pp, tp, rank, None), rank=rank, iterations=2)
    assert cli.main(["merge", str(tmp_path), "--json", "-q"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert sorted(p.name for p in (tmp_path / "merged").glob("merged*")) == ["merged.a.pt.trace.json.gz",
                                                                             "merged.b.pt.trace.json.gz"]
    assert out
