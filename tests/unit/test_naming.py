"""Trace names: every form an engine release or rlprof writes reads back as the rank it is.

The names are built here the way each writer builds them (the vLLM rank
suffix of ``get_worker_rank_suffix``, the instance-id names of vLLM
0.12-0.16, torch's default handler name of the env era, SGLang's
``filename_parts``, rlprof's own); the contract tests build them with each
tested release's own code (tests/compat/contract_*.py,
``test_release_trace_names_read_back``).
"""

import itertools
from pathlib import Path

import pytest

from rlprof_plugins.trace.format import naming


def vllm_suffix(dp, pp, tp, rank):  # vLLM >= 0.17, get_worker_rank_suffix(global_rank=rank)
    return f"dp{dp}_pp{pp}_tp{tp}_dcp0_ep0_rank{rank}"


def sglang_name(profile_id, prefix, tp, pp=0, pp_size=1, dp=0, dp_size=1, stage=""):
    parts = [profile_id, f"TP-{tp}"] + ([f"DP-{dp}"] if dp_size > 1 else []) + ([f"PP-{pp}"] if pp_size > 1 else [])
    return (f"{prefix}-" if prefix else "") + "-".join(parts) + (f"-{stage}" if stage else "") + ".trace.json.gz"


TP, PP = 2, 2


def topology():
    for pp, tp in itertools.product(range(PP), range(TP)):
        yield pp, tp, tp + TP * pp


@pytest.mark.parametrize("prefix", [None, "rollout", "my_run"])
@pytest.mark.parametrize("stage", [None, "prefill", "decode"])
def test_vllm_rank_suffix_names(prefix, stage):
    names = [naming.trace_file(naming.vllm_worker_name(prefix, vllm_suffix(0, pp, tp, r)), 1795 + r, stage)
             for pp, tp, r in topology()]
    parsed = [naming.parse(n) for n in names]
    assert {(p.group, p.stage, p.role) for p in parsed} == {(prefix or "", stage, "worker")}  # one merge group
    assert [p.rank for p in parsed] == [r for _, _, r in topology()]
    assert [(p.position["tp"], p.position["pp"]) for p in parsed] == [(tp, pp) for pp, tp, _ in topology()]


@pytest.mark.parametrize("prefix", [None, "rollout"])
def test_rlprof_rank_names_on_older_vllm(prefix):
    parsed = naming.parse(naming.trace_file(naming.vllm_worker_name(prefix, "rank3"), 7, "decode"))
    assert (parsed.group, parsed.rank, parsed.stage, parsed.label) == (prefix or "", 3, "decode", "rank3")


def test_vllm_instance_names_and_env_era_names():
    parsed = [naming.parse(f"a1b2c3d4-rank-{r}.{1795 + r}.pt.trace.json.gz") for r in range(4)]
    assert {p.group for p in parsed} == {"a1b2c3d4"} and [p.rank for p in parsed] == [0, 1, 2, 3]
    env_era = naming.parse("gpu-node-7.cluster_4242.1795.pt.trace.json.gz")
    assert env_era.role == "worker" and env_era.rank is None and env_era.form == "torch-default"


@pytest.mark.parametrize("prefix", [None, "rollout"])
def test_frontend_names(prefix):
    name = naming.trace_file(naming.vllm_worker_name(prefix, "node1.cluster_4242.async_llm"), 9)
    parsed = naming.parse(name)
    assert (parsed.role, parsed.group, parsed.label) == ("frontend", prefix or "", "frontend")


@pytest.mark.parametrize("prefix", [None, "rollout"])
@pytest.mark.parametrize("stage", ["", "EXTEND", "DECODE"])
def test_sglang_native_names(prefix, stage):
    parsed = [naming.parse(sglang_name("1795353928.61", prefix, tp, pp, PP, stage=stage)) for pp, tp, _ in topology()]
    assert {p.group for p in parsed} == {(f"{prefix}-" if prefix else "") + "1795353928.61"}
    assert {p.stage for p in parsed} == {{"": None, "EXTEND": "prefill", "DECODE": "decode"}[stage]}
    assert [p.label for p in parsed] == ["TP-0-PP-0", "TP-1-PP-0", "TP-0-PP-1", "TP-1-PP-1"]


@pytest.mark.parametrize("prefix", [None, "rollout"])
@pytest.mark.parametrize("stage", [None, "prefill"])
def test_rlprof_sglang_names(prefix, stage):
    labels = [naming.sglang_rank_label({"tp": tp, "tp_size": TP, "pp": pp, "pp_size": PP, "dp": 0, "dp_size": 1,
                                        "ep": 0, "ep_size": 1}) for pp, tp, _ in topology()]
    parsed = [naming.parse(naming.trace_file(naming.sglang_worker_name(prefix, label), 5, stage)) for label in labels]
    assert {(p.group, p.stage) for p in parsed} == {(prefix or "", stage)}
    assert sorted(p.order for p in parsed) == [p.order for p in parsed]


def test_merged_and_foreign_names():
    assert naming.parse(naming.merged_file("rollout", "decode")).role == "merged"
    assert not naming.is_trace(Path(naming.merged_file()))
    for name in ("notes.json", "rank0.profiler_out.txt", "TP-0-memory.pickle"):
        assert naming.parse(name) is None


def test_ascend_folders_carry_the_worker_name():
    parsed = naming.parse_ascend_folder(f"{vllm_suffix(0, 0, 1, 1)}_4242_20261123054637123{naming.ASCEND_SUFFIX}")
    assert (parsed.rank, parsed.position["tp"]) == (1, 1)


def test_rank_from_the_trace_header(tmp_path):
    import gzip
    import json

    path = tmp_path / "node_1.2.pt.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"schemaVersion": 1, "distributedInfo": {"backend": "gloo", "rank": 3, "world_size": 4, "pg_config": [
                   {"pg_name": "0", "ranks": [0, 1, 2, 3]}]},
                   "traceEvents": [{"ph": "X", "name": "x", "ts": 1, "dur": 1}] * 1000}, f)
    assert naming.trace_rank(path) == 3
    (tmp_path / "plain.json").write_text('{"traceEvents": []}')
    assert naming.trace_rank(tmp_path / "plain.json") is None


def test_device_events():
    assert naming.is_device_event({"ph": "X", "cat": "kernel"})
    assert naming.is_device_event({"ph": "X", "cat": "gpu_memcpy"})
    assert not naming.is_device_event({"ph": "X", "cat": "cpu_op"})
    assert not naming.is_device_event({"ph": "i", "cat": "kernel"})


def test_written_headers_give_the_rank_as_analysis_tools_read_it(tmp_path):
    """HolisticTraceAnalysis 0.5 finds a trace's rank with the text pattern
    ``"rank":\\s+(\\d+)`` in its first lines (as Kineto writes them); the
    traces rlprof writes (split, merged, synthetic) must match it."""
    import gzip
    import re

    from tests.helpers.synthetic_traces import write_rank_trace

    path = write_rank_trace(tmp_path / "rank3.1.pt.trace.json.gz", rank=3, iterations=2)
    with gzip.open(path, "rt") as f:
        head = "".join(f.readline() for _ in range(8))
    assert re.search(r'"rank":\s+(\d+)', head).group(1) == "3"
