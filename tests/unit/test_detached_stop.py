"""torch's stop off the engine thread (``backends/detached_stop.py``) through its one door into torch's C++
(``backends/torch_shim.py``): the gate, the canary and the faults.

The real torch profiler, backend, controller and exporter. A stop returns to the engine thread while torch
post-processes on a thread of its own without the GIL, the trace written is the one torch's own stop writes,
the next session waits for an ended one. Every fault ends with the engine thread going on and either the
recording kept or a ``failed`` status with its reason; none in a hang, an abort or a leak. The gate's refusals
and doctor's words are tested everywhere (``facts`` of other machines and torch builds); the path itself where
the shim is built and proven here (``make env`` builds it: ``rlprof build-shim``)."""

import collections
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from rlprof_plugins.backends import detached_stop, torch_shim
from rlprof_plugins.backends.torch_profiler import TorchProfilerBackend, TorchSettings
from rlprof_plugins.session.chunk_plan import ChunkPlan, StopCosts, recording_kind
from rlprof_plugins.session.recording import Recording
from rlprof_plugins.store.layout import Placement
from tests.helpers.traces import load_trace, pause_events, profiler_steps
from tests.unit.test_session import make_controller, settle, start

X = torch.randn(32, 32)


@pytest.fixture(scope="module")
def shim():
    """The shim, built and proven for this torch (once; ``make env`` has built it already)."""
    proof = torch_shim.build_and_prove(torch)
    torch_shim.reload()
    if not proof.get("ok") or detached_stop.why_not(torch, ("CPU",), build=False) is not None:
        pytest.skip(f"no detached stop here: {proof.get('detail')}")
    return torch_shim.loaded()


def operators(n: int) -> None:
    for _ in range(n):
        X[1:5].transpose(0, 1).reshape(-1).unsqueeze(0) * 2  # ten operators or so


def recorded(backend: TorchProfilerBackend, tmp_path: Path, name: str) -> dict:
    files = backend.export(Placement(tmp_path, False), name)
    return load_trace(files[0].path)


def op_counts(trace: dict) -> collections.Counter:
    return collections.Counter(e["name"] for e in trace["traceEvents"] if e.get("cat") == "cpu_op")


# ---- the gate and doctor's words: everywhere ---------------------------------------------------------------
FACTS = {"machine": "x86_64", "system": "Linux", "pointer_bits": 64, "torch": "2.13.0+cpu", "git": "cf30153c4c13",
         "cxx11_abi": True, "include": "/nowhere/torch/include"}


@pytest.mark.parametrize("change, why", [
    ({"machine": "aarch64"}, "machine aarch64 (proven: x86_64)"),
    ({"torch": "2.13.0a0+git1234abc"}, "torch 2.13.0a0+git1234abc is not a release build"),
    ({"torch": "2.13.0+vendor7"}, "torch 2.13.0+vendor7 is not a release build"),
    ({"torch": "2.13.0.dev20261101"}, "is not a release build"),
    ({"torch": "2.15.0"}, "torch 2.15.0 is not among the proven releases (2.13)"),
    ({"system": "Darwin"}, "Darwin with 64-bit pointers"),
    ({"pointer_bits": 32}, "Linux with 32-bit pointers"),
    ({"cxx11_abi": False}, "without the C++11 ABI"),
])
def test_the_gate_refuses_what_is_not_proven_and_says_why(change, why):
    assert torch_shim.gate(FACTS) is None
    assert why in torch_shim.gate({**FACTS, **change})


@pytest.mark.parametrize("change, words", [
    ({"machine": "aarch64"}, "torch's stop: on the engine thread (machine aarch64 (proven: x86_64))"),
    ({"torch": "2.13.0a0+git1234abc"}, "torch's stop: on the engine thread (torch 2.13.0a0+git1234abc is not a "
                                       "release build"),
])
def test_doctor_says_torchs_own_stop_runs_on_another_machine_or_torch_and_why(change, words, monkeypatch):
    from rlprof_plugins.cli.doctor import torch_stop_note
    from rlprof_plugins.config.launch_config import ENV, from_environment

    monkeypatch.setenv(ENV, '{"python_stacks": "sampled", "torch_profiler_activities": ["CPU"]}')
    assert torch_stop_note(from_environment(), facts={**FACTS, **change}).startswith(words)


def test_an_unbuilt_shim_is_named_with_the_command_that_builds_it(tmp_path, monkeypatch):
    monkeypatch.setenv(torch_shim.CACHE_ENV, str(tmp_path))
    assert torch_shim.why_not(torch, {**FACTS, "torch": "2.13.0"}) == (
        "the shim is not built for torch 2.13.0 (run `rlprof build-shim`)")
    monkeypatch.setattr(torch_shim, "compiler", lambda: None)
    assert "(no C++ compiler here)" in torch_shim.why_not(torch, FACTS)
    assert not torch_shim.build_and_prove.__defaults__  # (keyword-only options)
    with pytest.raises(torch_shim.ShimError, match="no C\\+\\+ compiler"):
        torch_shim.build(torch)


def test_without_a_built_shim_the_first_session_builds_it_and_the_next_uses_it(tmp_path, monkeypatch, shim):
    """The default path of a user who never ran ``rlprof build-shim``: the first session that could use the shim
    keeps torch's own stop and builds it in the background (a child process, the lowest priority); once built and
    proven, the same process's next sessions stop off the engine thread."""
    monkeypatch.setenv(torch_shim.CACHE_ENV, str(tmp_path / "empty-cache"))
    monkeypatch.setattr(torch_shim, "_STATE", torch_shim.ShimState())
    first = TorchProfilerBackend(TorchSettings(use_gzip=False))
    first.start()
    operators(10)
    first.stop()
    assert not first.detached  # torch's own stop, while the shim builds
    built = torch_shim.cache_folder(torch_shim.torch_facts(torch)) / "canary.json"
    deadline = time.monotonic() + 600
    while torch_shim.why_not(torch) is not None and time.monotonic() < deadline:  # decided afresh once proven
        time.sleep(0.2)
    assert built.is_file() and '"ok": true' in built.read_text(), built
    second = TorchProfilerBackend(TorchSettings(use_gzip=False))
    second.start()
    operators(10)
    second.stop()
    assert second.detached
    recorded(first, tmp_path, "first")
    recorded(second, tmp_path, "second")


def test_a_process_that_lost_the_build_picks_up_the_shim_another_built(tmp_path, monkeypatch, shim):
    """The ranks of one host ask for the shim together; one builds it, the others (the build lock lost, or
    asking while it ran) decided "not built". Each looks again after RECHECK_S and loads the built shim: its
    next session stops off the engine thread. Its one warning line says why it ran without the shim."""
    import logging
    import shutil

    built = torch_shim.cache_folder(torch_shim.torch_facts(torch))
    monkeypatch.setenv(torch_shim.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv("RLPROF_NO_SHIM_BUILD", "1")  # this process builds nothing itself: another rank does
    monkeypatch.setattr(torch_shim, "_STATE", torch_shim.ShimState())
    monkeypatch.setattr(torch_shim, "RECHECK_S", 0.3)
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("rlprof").addHandler(handler)
    try:
        first = TorchProfilerBackend(TorchSettings(use_gzip=False))
        first.start()
        operators(5)
        first.stop()
    finally:
        logging.getLogger("rlprof").removeHandler(handler)
    assert not first.detached
    lines = [r.getMessage() for r in records if "torch's stop runs on the engine thread" in r.getMessage()]
    assert len(lines) == 1 and "the shim is not built" in lines[0], lines
    assert not first.detachable  # a property: decided without starting a build (RLPROF_NO_SHIM_BUILD aside)
    mine = torch_shim.cache_folder(torch_shim.torch_facts(torch))
    shutil.copytree(built, mine, ignore=shutil.ignore_patterns(".build.lock"))  # what the other rank built
    time.sleep(0.35)
    second = TorchProfilerBackend(TorchSettings(use_gzip=False))
    second.start()
    operators(5)
    second.stop()
    assert second.detached
    recorded(second, tmp_path, "second")


def test_a_canary_that_timed_out_is_run_again_and_a_build_drops_the_old_proof_first(tmp_path, monkeypatch, shim):
    built = torch_shim.cache_folder(torch_shim.torch_facts(torch))
    monkeypatch.setenv(torch_shim.CACHE_ENV, str(tmp_path / "cache"))
    import shutil

    mine = torch_shim.cache_folder(torch_shim.torch_facts(torch))
    shutil.copytree(built, mine, ignore=shutil.ignore_patterns(".build.lock"))
    timed_out = {"ok": False, "detail": "the canary did not finish in 300 s", "timed_out": True, "attempts": 1}
    (mine / "canary.json").write_text(json.dumps(timed_out))
    assert torch_shim.needs_build(torch)  # a busy host's timeout is tried again
    proof = torch_shim.build_and_prove(torch, if_unlocked=True)
    assert proof["ok"] and proof["attempts"] == 2 and proof["build_seconds"] == 0.0, proof
    assert not torch_shim.needs_build(torch)
    (mine / "canary.json").write_text(json.dumps({**timed_out, "attempts": torch_shim.CANARY_ATTEMPTS}))
    assert not torch_shim.needs_build(torch)  # bounded: the last attempt's verdict stands
    seen = []
    real_replace = torch_shim.os.replace

    def replace(src, dst):
        seen.append((Path(dst).name, (mine / "canary.json").exists()))
        return real_replace(src, dst)

    monkeypatch.setattr(torch_shim.os, "replace", replace)
    torch_shim.build(torch)
    assert ("torch_shim.so", False) in seen  # the old proof was gone before the new library took its place


def test_where_it_cannot_run_torchs_own_stop_runs(monkeypatch):
    assert "only CPU" in detached_stop.why_not(torch, ("CPU", "CUDA"))
    monkeypatch.setenv(detached_stop.OFF_ENV, "1")
    assert detached_stop.why_not(torch, ("CPU",)) == f"{detached_stop.OFF_ENV}=1"
    monkeypatch.delenv(detached_stop.OFF_ENV)
    monkeypatch.setattr(torch_shim, "_STATE", torch_shim.ShimState(why="torch 2.99 is not among the proven releases",
                                                                   decided_at=time.monotonic()))
    backend = TorchProfilerBackend(TorchSettings())
    backend.start()
    operators(10)
    backend.stop()
    assert not backend.detached
    exact = TorchProfilerBackend(TorchSettings(with_stack=True))  # exact stacks: torch's binding builds them
    assert exact._experimental_config() == (None, False)


def test_a_canary_that_fails_keeps_the_shim_out(tmp_path, monkeypatch, shim):
    """A shim whose canary did not pass is never loaded: torch's own stop runs and the reason is the canary's."""
    folder = torch_shim.cache_folder(torch_shim.torch_facts(torch))
    proof = folder / "canary.json"
    kept = proof.read_text()
    try:
        proof.write_text('{"ok": false, "detail": "the canary exited -6: terminate called"}')
        assert torch_shim.why_not(torch, torch_shim.torch_facts(torch)) == (
            "the shim's canary failed: the canary exited -6: terminate called")
    finally:
        proof.write_text(kept)


# ---- the path: where the shim is built and proven ----------------------------------------------------------
def test_the_engine_thread_runs_while_torch_post_processes_and_the_trace_is_torchs(tmp_path, monkeypatch, shim):
    backend = TorchProfilerBackend(TorchSettings(use_gzip=False))
    backend.start()
    with backend.annotation("rlprof::iteration 0"):
        operators(3000)
    backend.stop()
    assert backend.detached
    ran = 0
    while backend.stop_seconds() is None:  # the engine thread holds the GIL and runs Python meanwhile
        ran += 1
    assert ran > 100, ran
    detached = recorded(backend, tmp_path, "detached")

    monkeypatch.setenv(detached_stop.OFF_ENV, "1")  # the operator's switch: torch's own stop, here
    native = TorchProfilerBackend(TorchSettings(use_gzip=False))
    native.start()
    with native.annotation("rlprof::iteration 0"):
        operators(3000)
    native.stop()
    assert not native.detached and native.stop_seconds() is None
    own = recorded(native, tmp_path, "native")
    assert op_counts(detached) == op_counts(own) and op_counts(own)["aten::transpose"] == 3000
    assert detached["rlprof_python_stacks"] == own["rlprof_python_stacks"] == "off"  # metadata kept
    threads = {e["tid"] for e in detached["traceEvents"] if e.get("cat") == "cpu_op"}
    assert threads == {threading.get_native_id()}, threads
    assert shim.live() == {"results": 0, "detached": 0}


def test_the_next_session_waits_for_an_ended_one_and_both_are_whole(tmp_path, shim):
    first = TorchProfilerBackend(TorchSettings(use_gzip=False))
    first.start()
    operators(2000)
    first.stop()
    second = TorchProfilerBackend(TorchSettings(use_gzip=False))
    second.start()  # torch's profiler is one a process: waits for the first's post-processing
    assert first.stop_seconds() is not None
    operators(100)
    second.stop()
    writer = threading.Thread(target=lambda: recorded(first, tmp_path, "first"))
    writer.start()  # the first written while the second post-processes
    two = recorded(second, tmp_path, "second")
    writer.join()
    one = load_trace(next(tmp_path.glob("first.*")))
    assert op_counts(one)["aten::transpose"] == 2000 and op_counts(two)["aten::transpose"] == 100


def test_the_chunk_plan_learns_from_rotations_not_from_a_detached_stops_moment(tmp_path, shim):
    """A stop at idle that left the engine thread cost it a moment and teaches the plan nothing; a
    rotation stops in place, on the engine thread, and its pause is what the plan learns."""
    costs = StopCosts()
    backend = TorchProfilerBackend(TorchSettings(use_gzip=False))
    kind = recording_kind(backend)
    assert kind[-1] is True and recording_kind(TorchProfilerBackend(TorchSettings(with_stack=True)))[-1] is False
    plan = ChunkPlan("auto", 200, costs, kind)
    recording = Recording.of_rank(backend, tmp_path, step=False, name="rank0", rank="0", plan=plan)
    recording.start()

    def iterations(first: int) -> None:
        for index in range(first, first + 5):
            recording.enter_iteration(index, None)
            operators(600)
            recording.leave_iteration()

    iterations(0)
    recording.park()
    assert backend.detached and costs.rates(kind) == StopCosts().rates(kind)  # the prior still
    rotated = TorchProfilerBackend(TorchSettings(use_gzip=False))
    recording.resume(rotated)
    iterations(5)
    recording.rotate(TorchProfilerBackend(TorchSettings(use_gzip=False)))
    assert not rotated.detached  # stopped in place
    assert costs.per_iteration(kind) == pytest.approx(recording.pauses[-1].seconds / 5)
    recording.stop()
    recording.chunks.stopped.append(recording.backend)  # as the export does: every chunk written, each freed
    recording.chunks.write_all()


def test_a_chunked_session_at_idle_pauses_the_engine_a_moment_and_records_every_iteration(tmp_path, shim):
    ctl = make_controller(tmp_path)
    assert start(ctl, global_step=3, chunk_iterations="auto")["ok"]
    for _ in range(3):
        for _ in range(4):
            ctl.begin_iteration(None)
            operators(150)
            ctl.end_iteration()
        ctl.idle()  # the engine is about to wait: the chunk ends there, detached
    assert ctl.handle({"op": "stop"})["ok"]
    status = settle(ctl, 3)
    ctl.shutdown()
    assert status["state"] == "done", status
    trace = load_trace(Path(status["files"][0]))
    assert profiler_steps(trace) == list(range(12))
    assert op_counts(trace)["aten::transpose"] == 12 * 150
    idle = [p for p in pause_events(trace) if p["args"]["cause"] == "idle"]
    assert len(idle) == 3


def test_doctor_says_where_torchs_stop_runs(monkeypatch, shim):
    from rlprof_plugins.cli.doctor import torch_stop_note
    from rlprof_plugins.config.launch_config import ENV, from_environment

    monkeypatch.setenv(ENV, '{"python_stacks": "sampled", "torch_profiler_activities": ["CPU"]}')
    assert "off the engine thread" in torch_stop_note(from_environment())
    assert str(shim.path) in torch_stop_note(from_environment())
    monkeypatch.setenv(ENV, '{"python_stacks": "exact"}')
    assert "on the engine thread (exact Python stacks" in torch_stop_note(from_environment())
    monkeypatch.setenv(ENV, '{"python_stacks": "off", "torch_profiler_activities": ["CPU"]}')
    monkeypatch.setenv(detached_stop.OFF_ENV, "1")
    assert torch_stop_note(from_environment()) == f"torch's stop: on the engine thread ({detached_stop.OFF_ENV}=1)"


def test_with_no_thread_to_be_had_the_stop_post_processes_in_place_and_the_next_start_does_not_wait(
        tmp_path, monkeypatch, shim):
    class NoThreads(threading.Thread):
        def start(self):
            raise RuntimeError("can't start new thread")

    backend = TorchProfilerBackend(TorchSettings(use_gzip=False))
    backend.start()
    operators(300)
    monkeypatch.setattr(detached_stop.threading, "Thread", NoThreads)
    backend.stop()
    assert backend.stop_seconds() is not None and not detached_stop._IN_FLIGHT  # done before stop() returned
    monkeypatch.undo()
    following = TorchProfilerBackend(TorchSettings(use_gzip=False))
    following.start()  # nothing in flight to wait for
    following.stop()
    assert op_counts(recorded(backend, tmp_path, "in_place"))["aten::transpose"] == 300
    recorded(following, tmp_path, "following")


# ---- the faults: through the real backend and controller ---------------------------------------------------
def _session(ctl, step: int, iterations: int = 4) -> None:
    assert start(ctl, global_step=step, chunk_iterations=0)["ok"]
    for _ in range(iterations):
        ctl.begin_iteration(None)
        operators(50)
        ctl.end_iteration()


def _engine_goes_on(ctl, tmp_path: Path, step: int) -> None:
    """After a fault: the engine thread iterates, and the next session records and writes its trace."""
    _session(ctl, step)
    assert ctl.handle({"op": "stop"})["ok"]
    status = settle(ctl, step)
    assert status["state"] == "done", status
    assert profiler_steps(load_trace(Path(status["files"][0]))) == [0, 1, 2, 3]


def test_a_real_torch_error_is_caught_where_it_is_thrown(shim):
    """torch's own C++ check (no profiler session on this thread) comes back as a Python error, no abort."""
    with pytest.raises(torch_shim.ShimError) as e:
        shim.owners()
    assert e.value.args[0]  # torch's message


def test_a_cxx_error_as_the_session_detaches_leaves_torchs_own_stop_and_the_recording(tmp_path, monkeypatch,
                                                                                      shim):
    monkeypatch.setenv("RLPROF_SHIM_FAULT", "detach")  # a C++ exception thrown inside the shim's detach
    ctl = make_controller(tmp_path)
    _session(ctl, 1)
    assert ctl.handle({"op": "stop"})["ok"]
    status = settle(ctl, 1)
    assert status["state"] == "done", status  # torch's own stop ran on the engine thread: the recording kept
    assert profiler_steps(load_trace(Path(status["files"][0]))) == [0, 1, 2, 3]
    monkeypatch.delenv("RLPROF_SHIM_FAULT")
    _engine_goes_on(ctl, tmp_path, 2)
    ctl.shutdown()
    assert shim.live() == {"results": 0, "detached": 0}


@pytest.mark.parametrize("where", ["finish", "save"])
def test_a_cxx_error_in_torchs_post_processing_or_writer_fails_the_session_with_its_reason(tmp_path, monkeypatch,
                                                                                          shim, where):
    monkeypatch.setenv("RLPROF_SHIM_FAULT", where)
    ctl = make_controller(tmp_path)
    _session(ctl, 1)
    assert ctl.handle({"op": "stop"})["ok"]
    status = settle(ctl, 1)
    assert status["state"] == "failed" and f"injected C++ fault in {where}" in status["error"], status
    monkeypatch.delenv("RLPROF_SHIM_FAULT")
    _engine_goes_on(ctl, tmp_path, 2)
    ctl.shutdown()
    assert shim.live() == {"results": 0, "detached": 0}  # what the failed one recorded was freed


@pytest.mark.parametrize("path", ["detached", "torch's own stop"])
def test_a_session_ended_elsewhere_fails_with_its_reason_and_the_engine_goes_on(tmp_path, monkeypatch, path):
    """Another library called torch's own ``_disable_profiler`` on the engine thread: rlprof's stop finds no
    session and says so, on both paths (the shim's, and torch's own stop where no shim serves). torch's own stop
    is not called then: torch 2.13's ends the process when no session runs (it reads the session it pops before
    checking it), which this test would show as a crash."""
    if path == "torch's own stop":
        monkeypatch.setenv(detached_stop.OFF_ENV, "1")
    ctl = make_controller(tmp_path)
    _session(ctl, 1)
    torch.autograd.profiler._disable_profiler()  # the session ends elsewhere
    reply = ctl.handle({"op": "stop"})
    assert reply["ok"] is False and reply["session"]["state"] == "failed", reply
    status = settle(ctl, 1)
    assert status["state"] == "failed" and "ended elsewhere" in status["error"], status
    _engine_goes_on(ctl, tmp_path, 2)
    ctl.shutdown()
    if path == "detached" and detached_stop.why_not(torch, ("CPU",), build=False) is None:
        assert torch_shim.loaded().live() == {"results": 0, "detached": 0}


FULL_DISK = """
import resource, signal, sys
from pathlib import Path
import torch
from rlprof_plugins.backends import torch_shim
from rlprof_plugins.backends.torch_profiler import TorchProfilerBackend, TorchSettings

backend = TorchProfilerBackend(TorchSettings(use_gzip=False))
backend.start()
x = torch.randn(32, 32)
for _ in range(2000):
    x[1:5].transpose(0, 1).reshape(-1).unsqueeze(0) * 2
backend.stop()
assert backend.detached
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG), as on a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (65536, resource.RLIM_INFINITY))
try:
    backend._detached.save(Path(sys.argv[1]) / "full.pt.trace.json")
    print("SAVED")
except torch_shim.ShimError as e:
    print("REFUSED", e)
backend.discard()
print("LIVE", torch_shim.loaded().live())
"""


def test_a_full_disk_fails_the_write_with_its_reason_and_frees_the_recording(tmp_path, shim):
    """Kineto's writer logs a write it could not make and renames what it wrote into place: a cut trace. The
    detached stop checks that the trace is whole, refuses a cut one with its reason, and frees the recording. A
    file-size limit stands in for the full disk (a write past it fails, as on a full one), in a child process."""
    run = subprocess.run([sys.executable, "-c", FULL_DISK, str(tmp_path)], capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "REFUSED torch's trace writer left no whole trace" in run.stdout, run.stdout
    assert "LIVE {'results': 0, 'detached': 0}" in run.stdout
    with pytest.raises(torch_shim.ShimError, match="no whole trace"):  # and a folder that is not there
        backend = TorchProfilerBackend(TorchSettings(use_gzip=False))
        backend.start()
        operators(100)
        backend.stop()
        try:
            backend._detached.save(tmp_path / "not-a-folder" / "x.json")
        finally:
            backend.discard()
    assert shim.live() == {"results": 0, "detached": 0}


def test_operators_on_another_thread_throughout_the_stops_change_nothing(tmp_path, shim):
    """A thread of the engine's process runs torch operators while the engine thread records and stops, 20
    times: every trace holds the engine thread's operators only, whole, and nothing crashes."""
    busy = threading.Event()

    def other() -> None:
        y = torch.randn(32, 32)
        while not busy.is_set():
            y = torch.relu(y @ y)
            y = y / (y.norm() + 1)

    neighbour = threading.Thread(target=other)
    neighbour.start()
    try:
        for k in range(20):
            backend = TorchProfilerBackend(TorchSettings(use_gzip=False))
            backend.start()
            operators(200)
            backend.stop()
            assert backend.detached
            trace = recorded(backend, tmp_path, f"with-neighbour-{k}")
            assert op_counts(trace)["aten::transpose"] == 200
            assert {e["tid"] for e in trace["traceEvents"] if e.get("cat") == "cpu_op"} == {threading.get_native_id()}
    finally:
        busy.set()
        neighbour.join()
    assert shim.live() == {"results": 0, "detached": 0}


def test_torchs_stop_that_never_reaches_rlprofs_stand_in_keeps_torchs_own_recording(tmp_path, monkeypatch, shim):
    """A torch that ends its session by another name than ``_disable_profiler`` (drift): rlprof's stand-in is
    never called, torch's own result is written, nothing is discarded."""
    import torch.autograd.profiler as autograd_profiler

    exit_ = autograd_profiler.profile.__exit__

    def drifted(self, *args):
        stand_in = autograd_profiler._disable_profiler
        autograd_profiler._disable_profiler = torch._C._autograd._disable_profiler  # torch's own, by another name
        try:
            return exit_(self, *args)
        finally:
            autograd_profiler._disable_profiler = stand_in

    monkeypatch.setattr(autograd_profiler.profile, "__exit__", drifted)
    ctl = make_controller(tmp_path)
    _session(ctl, 1)
    assert ctl.handle({"op": "stop"})["ok"]
    status = settle(ctl, 1)
    assert status["state"] == "done", status
    assert profiler_steps(load_trace(Path(status["files"][0]))) == [0, 1, 2, 3]
    ctl.shutdown()
    assert shim.live() == {"results": 0, "detached": 0}


def test_the_interpreter_exiting_while_a_stop_post_processes_joins_it(tmp_path, shim):
    """The post-processing thread is no daemon: an interpreter that exits right after a detached stop waits for
    it, so no thread is inside libtorch while its static destructors run."""
    code = ("import sys, torch\n"
            "from rlprof_plugins.backends.torch_profiler import TorchProfilerBackend, TorchSettings\n"
            "b = TorchProfilerBackend(TorchSettings(use_gzip=False)); b.start()\n"
            "x = torch.randn(32, 32)\n"
            "for _ in range(20000): x[1:5].transpose(0, 1).reshape(-1).unsqueeze(0) * 2\n"
            "b.stop(); print('detached', b.detached, b.stop_seconds() is None, flush=True)\n"
            "sys.exit(0)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "RLPROF_CACHE_DIR": os.environ.get(torch_shim.CACHE_ENV, "")} if
                         os.environ.get(torch_shim.CACHE_ENV) else None)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "detached True True" in run.stdout  # it exited while torch still post-processed
    assert "terminate called" not in run.stderr and "Fatal Python error" not in run.stderr


def test_a_session_failing_mid_recording_keeps_what_it_recorded_and_frees_it(tmp_path, shim):
    """A session that fails while its profiler records (an annotation that cannot open): the running recording
    is stopped off the engine thread, written as a kept chunk with the command that joins it, and freed: nothing
    of it stays in the process (tens of MB here), measured."""
    from tests.helpers.bursty import status_mb

    class FailsAtIterationOne(TorchProfilerBackend):
        failed = False  # once: the next session records as ever

        def annotation(self, name):
            if name == "rlprof::iteration 1" and not FailsAtIterationOne.failed:
                FailsAtIterationOne.failed = True
                raise RuntimeError("an annotation could not open")
            return super().annotation(name)

    ctl = make_controller(tmp_path, lambda table, _overrides=None: FailsAtIterationOne(TorchSettings()))
    assert start(ctl, global_step=1, chunk_iterations=0)["ok"]
    before = status_mb(os.getpid())
    ctl.begin_iteration(None)
    operators(40000)
    ctl.end_iteration()
    grown = status_mb(os.getpid())
    ctl.begin_iteration(None)  # the annotation fails: so does the session, not the engine
    status = settle(ctl, 1)
    assert status["state"] == "failed" and "an annotation could not open" in status["error"], status
    deadline = time.monotonic() + 300  # what it recorded is written on the exporter thread after the failure
    while "rlprof stitch" not in (status["error"] or "") and time.monotonic() < deadline:
        time.sleep(0.05)
        status = ctl.handle({"op": "status", "global_step": 1})["session"]
    kept = [Path(f) for f in status["files"]]
    assert kept and all(f.exists() for f in kept), status  # the recording, kept
    assert "rlprof stitch" in status["error"]  # and the command that finishes it
    _engine_goes_on(ctl, tmp_path, 2)
    ctl.shutdown()
    assert shim.live() == {"results": 0, "detached": 0}
    after = status_mb(os.getpid())
    print(f"resident MB: before {before:.0f}, while recorded {grown:.0f}, after the failure {after:.0f}")
    assert after < grown  # what it held went back (here 393, 551, 419 MB)
