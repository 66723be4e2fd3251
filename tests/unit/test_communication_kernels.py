"""Which kernels are communication (``trace/analysis/communication.py``): every library's names, on a real GPU trace.

Each family's example names are copied from the library's source or from traces recorded with it; every
one must read as communication, and computation kernels that merely hold such a word (an attention
kernel that reduces partial results, torch's reduce kernels, broadcasting elementwise kernels) must not.
The acceptance is on a real A100 trace (rank0-of-16, HTA's test data: NCCL's send/recv kernels of an
all-to-all): with its NCCL kernels renamed to each library's kernel, its device time is the same
to the microsecond, communication included; renamed to a computation kernel, the communication is gone.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from rlprof_plugins.trace.analysis.communication import COMPUTE_LOOKALIKES, FAMILIES, family_of, family_table, is_communication
from rlprof_plugins.trace.analysis.trace_stats import trace_stats

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "gpu-published" / "rank0-of-16"


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.library)
def test_every_name_copied_from_a_library_is_its_communication(family):
    for name in family.examples:
        assert is_communication(name), (family.library, name)
        assert re.search(family.pattern, name, re.IGNORECASE), (family.library, name)
        assert family_of(name) is not None


@pytest.mark.parametrize("name,source", COMPUTE_LOOKALIKES, ids=lambda v: v[:40])
def test_computation_that_holds_a_communication_word_stays_computation(name, source):
    assert not is_communication(name), (name, source)
    assert family_of(name) is None


def test_the_engines_hottest_collectives_are_named():
    """The kernels a TP=8 decode spends its exposed communication in: none may read as compute."""
    for name in ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, "
                 "vllm::Signal*, __nv_bfloat16*, int, int)",
                 "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, "
                 "unsigned long, unsigned int**, unsigned long, unsigned long)",
                 "void deep_ep::internode_ll::combine<true, 7168>(void*, int*, int, int, int, int, void*)"):
        assert is_communication(name), name
    assert family_of("void vllm::cross_device_reduce_2stage<__half, 4>(...)").library.startswith("vLLM and SGLang")


@pytest.fixture(scope="module")
def device_events() -> list[dict]:
    """rank0-of-16's events the device time is read from: its iterations, launches and device items (the
    operators and flow arrows left out: they take the read's time and change nothing here)."""
    (path,) = FIXTURE.glob("*.json.gz")
    trace = json.loads(gzip.decompress(path.read_bytes()))
    keep = {"cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy", "gpu_memset"}
    return [e for e in trace["traceEvents"]
            if e.get("cat") in keep or str(e.get("name", "")).startswith("ProfilerStep#") or e.get("ph") == "M"]


def device_time(tmp_path: Path, events: list[dict], rename: str | None) -> dict:
    """The device time of the trace's iterations (us) with every NCCL kernel renamed (None: as recorded)."""
    renamed = [dict(e, name=rename) if rename and e.get("cat") == "kernel" and "nccl" in e["name"].lower() else e
               for e in events]
    assert rename is None or renamed != events
    path = tmp_path / f"{len(list(tmp_path.iterdir()))}.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": renamed}))
    st = trace_stats(path, "rank0", None)
    assert st.error is None and st.iterations > 0, st.error
    return st.device


def test_each_librarys_kernels_count_as_nccls_do(tmp_path, device_events):
    recorded = device_time(tmp_path, device_events, None)
    assert recorded["exposed_communication"] > 0 and recorded["communication"] > 0
    for family in FAMILIES:
        mine = device_time(tmp_path, device_events, family.examples[0])
        assert mine == recorded, (family.library, mine, recorded)
    as_compute = device_time(tmp_path, device_events, COMPUTE_LOOKALIKES[0][0])
    assert as_compute["communication"] == 0 and as_compute["compute"] > recorded["compute"]


def test_docs_table_is_the_table():
    docs = (Path(__file__).resolve().parents[2] / "docs" / "device-time.md").read_text()
    block = docs.split("<!-- communication-kernels:start -->\n")[1].split("<!-- communication-kernels:end -->")[0]
    assert block == family_table(), "regenerate: make patch-table"
