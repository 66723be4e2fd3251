"""slime on SGLang, with and without rlprof: the same answers, the files where slime looks.

Replays slime's ``tools/profile_rollout.py`` (tests/clients/slime_sglang.py
cites it) through the real sglang-router in front of a real SGLang 0.5.23
CPU server: once native (``RLPROF_DISABLE=1``), once with rlprof configured
(``--profiler-config`` with its own directory, slime's folder allowed by
``allowed_output_dirs``). Wherever native answers 2xx rlprof answers 2xx,
and after the auto-stop the folder holds one ``TP-0`` trace that slime's
analyzer picks up, recording the 3 iterations asked for.

slime is run as ``--output-dir <tmp> --activities CPU``: its defaults are
``/tmp/sglang_profile`` and ``["GPU"]``. On this CPU host rlprof refuses GPU
with 400 naming ``activities`` (item 4 of the real-clients issue; on a GPU
host the default is honoured), and a folder the operator did not allow with
400 naming ``output_dir`` and ``allowed_output_dirs`` (the one deliberate
exception to "what native accepts, rlprof accepts"): both are asserted here.
"""

import time

import pytest

from tests.clients import slime_sglang as slime
from tests.helpers.traces import iteration_indices, load_trace


# `make test-extended` (CI's 25 minutes: docs/testing.md). CI runs SGLang's native fields (`num_steps`, `activities`,
# `with_stack`) on tests/e2e/test_sglang_server_tp1.py and the fleet behind sglang-router in
# tests/e2e/test_trainer_control.py.
pytestmark = pytest.mark.extended

def rlprof_config(tmp) -> dict:
    return {"torch_profiler_dir": str(tmp / "traces"), "torch_profiler_with_stack": False,
            "allowed_output_dirs": [str(tmp / "slime")]}


@pytest.fixture(scope="module")
def fleets(tmp_path_factory):
    from tests.helpers.routers import start_router
    from tests.helpers.sglang_server import available, start_server
    from tests.helpers.vllm_server import start_together

    if not available():
        pytest.skip("SGLang environment (.venv-sglang) not built")
    tmps = {name: tmp_path_factory.mktemp(f"slime-{name}") for name in ("native", "rlprof")}
    servers = start_together({
        "native": lambda: start_server(tmps["native"], None, env={"RLPROF_DISABLE": "1"}),
        "rlprof": lambda: start_server(tmps["rlprof"], rlprof_config(tmps["rlprof"])),
    })
    routers = {}
    try:
        for name, server in servers.items():
            routers[name] = start_router("sglang-router", tmps[name], [server.url], expect_workers=1)
        yield {name: (routers[name], servers[name], tmps[name]) for name in servers}
    finally:
        for router in routers.values():
            router.stop()
        for server in servers.values():
            server.stop()


def wait_for_traces(folder, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        ranks = slime.traces_as_slime_reads(folder)
        if ranks:
            return ranks
        time.sleep(0.5)
    return {}


def replay(router, server, tmp) -> dict:
    """slime's start, traffic until its 3 steps have run, slime's optional stop."""
    folder = tmp / "slime"
    started = slime.start(router.url, str(folder), activities=["CPU"])
    for _ in range(2):
        server.complete(max_tokens=4)
    ranks = wait_for_traces(folder)  # the auto-stop after num_steps writes the trace
    stopped = slime.stop(router.url)
    return {"start": [r.status_code for r in started.values()], "stop": [r.status_code for r in stopped.values()],
            "ranks": ranks, "start_text": [r.text for r in started.values()]}


def test_slime_sequence_answers_and_files_match_native(fleets):
    runs = {name: replay(*fleet) for name, fleet in fleets.items()}
    native, ours = runs["native"], runs["rlprof"]
    assert native["start"] == [200] and native["ranks"], native  # the replay is real: SGLang wrote its trace
    for call in ("start", "stop"):
        for theirs, mine in zip(native[call], ours[call]):
            if 200 <= theirs < 300:
                assert 200 <= mine < 300, (call, native, ours)
    assert list(ours["ranks"]) == [0] and len(ours["ranks"][0]) == 1, ours
    assert iteration_indices(load_trace(ours["ranks"][0][0])) == [0, 1, 2]  # num_steps 3


def test_slime_defaults_on_a_cpu_host_are_refused_naming_the_field(fleets):
    router, server, tmp = fleets["rlprof"]
    before = sorted(p for p in tmp.rglob("*") if p.is_file() and "trace" in p.name)
    gpu = slime.start(router.url, str(tmp / "slime"))  # activities ["GPU"]
    (answer,) = gpu.values()
    assert answer.status_code == 400 and answer.json()["error"]["field"] == "activities", answer.text
    elsewhere = slime.start(router.url, "/tmp/sglang_profile", activities=["CPU"])  # slime's default folder
    (answer,) = elsewhere.values()
    assert answer.status_code == 400 and answer.json()["error"]["field"] == "output_dir", answer.text
    assert "allowed_output_dirs" in answer.json()["error"]["message"]
    assert sorted(p for p in tmp.rglob("*") if p.is_file() and "trace" in p.name) == before
    assert server.get("/profile_status").json()["state"] in ("done", "idle")
