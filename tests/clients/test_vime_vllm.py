"""vime on vLLM, with and without rlprof: the same answers, the files where vime looks.

vime's current ``tools/profile_rollout.py`` (vllm-project/vime; shared engine
notes, section 7) starts the server with ``--profiler-config
'{"profiler":"torch","torch_profiler_dir":DIR,"max_iterations":3,
"ignore_frontend":true}'``, sends ``POST /start_profile {}``, a few
completions, then optionally ``POST /stop_profile {}``. The same sequence
runs against a native vLLM 0.32 server (``RLPROF_DISABLE=1``) and one with
rlprof: wherever native answers 2xx, rlprof does too, and when the stop
returns the worker's trace is in DIR, holding the 3 iterations asked for.

vime's earlier version of the script sent slime's SGLang-style body
(``output_dir``, ``num_steps``, ``activities``, ...) to vLLM. Native vLLM
ignores those fields and answers 200; rlprof gives them SGLang's meaning
(``num_steps`` is the window; an ``output_dir`` outside the allowed
directories is ignored with a warning in the answer, files go to the
configured folder as natively). Replayed with ``activities: ["CPU"]``: on
this CPU host rlprof refuses slime's default ``["GPU"]`` with 400 naming
``activities`` (asserted too), where native vLLM records CPU only.
"""

import pytest

from tests.helpers.traces import iteration_indices, load_trace
from tests.helpers.vllm_server import start_server, start_together

# `make test-extended` (CI's 25 minutes: docs/testing.md). CI runs verl's vLLM sequence with and without rlprof
# (tests/clients/test_verl_vllm.py), `{}` bodies and stops on tests/e2e/test_vllm_server_tp1.py and `max_iterations`
# on vLLM's real parser (tests/vllm/test_vllm_config_keys.py).
pytestmark = [pytest.mark.vllm, pytest.mark.extended]


def vime_config(tmp) -> dict:
    return {"profiler": "torch", "torch_profiler_dir": str(tmp / "traces"), "max_iterations": 3,
            "ignore_frontend": True, "torch_profiler_with_stack": False}


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    def start(name: str, env: dict):
        tmp = tmp_path_factory.mktemp(f"vime-{name}")
        return lambda: start_server(tmp, vime_config(tmp), env=env)

    started = start_together({"native": start("native", {"RLPROF_DISABLE": "1"}), "rlprof": start("rlprof", {})})
    yield started
    for server in started.values():
        server.stop()


EARLIER_BODY = {"output_dir": "/tmp/sglang_profile", "num_steps": 3, "activities": ["CPU"],
                "profile_by_stage": False, "with_stack": False, "record_shapes": False}


def replay(server, body=None) -> dict:
    """vime's calls; the folder as vime finds it when its stop returns."""
    before = set(server.trace_dir.rglob("*.pt.trace.json*"))
    start = server.post("/start_profile", {} if body is None else body)
    for _ in range(3):
        server.complete(max_tokens=4)
    stop = server.post("/stop_profile", {})
    traces = sorted(p for p in set(server.trace_dir.rglob("*.pt.trace.json*")) - before if "async_llm" not in p.name)
    return {"start": start.status_code, "stop": stop.status_code, "traces": traces,
            "answer": start.json() if "json" in start.headers.get("content-type", "") else {}}


def test_vime_sequence_answers_and_files_match_native(servers):
    native, ours = replay(servers["native"]), replay(servers["rlprof"])
    for call in ("start", "stop"):
        if 200 <= native[call] < 300:
            assert 200 <= ours[call] < 300, (call, native, ours)
    assert native["traces"], native  # the replay is real: native vLLM wrote its trace too
    assert len(ours["traces"]) == 1 and ours["traces"][0].parent == servers["rlprof"].trace_dir, ours
    assert iteration_indices(load_trace(ours["traces"][0])) == [0, 1, 2]  # max_iterations 3


def test_vime_earlier_sglang_style_body_works_on_vllm(servers):
    native, ours = replay(servers["native"], EARLIER_BODY), replay(servers["rlprof"], EARLIER_BODY)
    for call in ("start", "stop"):
        if 200 <= native[call] < 300:
            assert 200 <= ours[call] < 300, (call, native, ours)
    assert native["traces"], native
    assert len(ours["traces"]) == 1 and ours["traces"][0].parent == servers["rlprof"].trace_dir, ours
    assert iteration_indices(load_trace(ours["traces"][0])) == [0, 1, 2]  # num_steps 3
    assert any("output_dir" in w and "ignored" in w for w in ours["answer"]["warnings"]), ours["answer"]


def test_device_activities_this_host_lacks_are_refused(servers):
    server = servers["rlprof"]
    before = set(server.trace_dir.rglob("*"))
    r = server.post("/start_profile", {**EARLIER_BODY, "activities": ["GPU"]})
    assert r.status_code == 400 and r.json()["error"]["field"] == "activities", r.text
    assert set(server.trace_dir.rglob("*")) == before
