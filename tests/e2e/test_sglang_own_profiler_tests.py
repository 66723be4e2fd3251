"""What SGLang's own profiler tests assert, asserted here with rlprof installed and, beside it, with rlprof
disabled (``RLPROF_DISABLE=1``): the same answers and the same files.

SGLang's ``test/registered/profiling/test_start_profile.py`` launches a server with
``SGLANG_TORCH_PROFILER_DIR`` set and no other profiling configuration, then:

- starts a profile with ``start_step`` given as a string (``"15"``) and ``num_steps``: 200, and the
  directory holds a trace once a 32-token generation has returned (the first request on a fresh server,
  since ``start_step`` counts forward passes from the server's start);
- starts one with no body: the directory stays empty through a generation, and holds a trace once
  ``/stop_profile`` has answered;
- starts one with ``num_steps`` alone: a trace once the generation has returned.

Each server here is launched the same way (the tiny model on CPU). Beyond SGLang's test: every number field
given as a string reads as SGLang's route reads it, and a value SGLang's route refuses (``"five"``) gets
SGLang's own answer (its handler's 400) on both, the server serving on.
"""

import shutil
import time
from pathlib import Path

import pytest


# rlprof's side in make test; the native twin (the same assertions with rlprof disabled) in make test-extended,
# for CI's time: it holds what the engine's own tests hold, and changes only with the engine release
@pytest.fixture(scope="module", params=["rlprof", pytest.param("native", marks=pytest.mark.extended)])
def launched(request, tmp_path_factory):
    """A server as SGLang's test launches it: the profiler's directory from the environment alone."""
    from tests.helpers.sglang_server import start_server

    tmp = tmp_path_factory.mktemp(f"sglang-own-tests-{request.param}")
    folder = tmp / "profiler_dir"
    env = {"SGLANG_TORCH_PROFILER_DIR": str(folder)}
    if request.param == "native":
        env["RLPROF_DISABLE"] = "1"
    server = start_server(tmp, None, env=env)
    server.profiler_dir = folder
    yield server
    server.stop()


def generate(server) -> None:
    r = server.post("/generate", {"text": "The capital of France is",
                                  "sampling_params": {"temperature": 0, "max_new_tokens": 32}})
    assert r.status_code == 200, r.text


def files_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def fresh(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)


def until_files(folder: Path, timeout: float = 60) -> list[str]:
    """SGLang writes a ``num_steps`` trace on the scheduler as the last step ends; the generation's answer can
    come a moment before the file is renamed into place."""
    deadline = time.time() + timeout
    while not files_in(folder) and time.time() < deadline:
        time.sleep(0.2)
    return files_in(folder)


def test_start_step_as_a_string_with_num_steps_on_a_fresh_server(launched):
    """The first request on the server (SGLang's test must run first for start_step to work)."""
    fresh(launched.profiler_dir)
    r = launched.post("/start_profile", {"start_step": "15", "num_steps": 5})
    assert r.status_code == 200 and r.text == "Start profiling.\n", r.text
    generate(launched)
    assert any(name.endswith(".trace.json.gz") for name in until_files(launched.profiler_dir)), \
        files_in(launched.profiler_dir)
    assert launched.process.poll() is None  # the server lives on


def test_a_bodyless_start_writes_nothing_until_the_stop_answers(launched):
    fresh(launched.profiler_dir)
    assert launched.post("/start_profile").status_code == 200
    generate(launched)
    assert files_in(launched.profiler_dir) == []
    stop = launched.post("/stop_profile")
    assert stop.status_code == 200, stop.text
    assert any(name.endswith(".trace.json.gz") for name in files_in(launched.profiler_dir))


def test_num_steps_alone(launched):
    fresh(launched.profiler_dir)
    assert launched.post("/start_profile", {"num_steps": 5}).status_code == 200
    generate(launched)
    assert any(name.endswith(".trace.json.gz") for name in until_files(launched.profiler_dir))


def test_every_number_field_as_a_string_reads_as_sglang_reads_it(launched):
    fresh(launched.profiler_dir)
    r = launched.post("/start_profile", {"num_steps": "3", "with_stack": "false", "activities": ["CPU"],
                                         "profile_prefix": "strings"})
    assert r.status_code == 200, r.text
    generate(launched)
    names = until_files(launched.profiler_dir)
    assert any(n.startswith("strings-") and n.endswith(".trace.json.gz") for n in names), names


@pytest.mark.parametrize("body", [{"num_steps": "five"}, {"start_step": [1]}, {"with_stack": "maybe"}])
def test_a_value_sglangs_route_refuses_is_its_own_answer_and_the_server_serves_on(launched, body):
    """SGLang's own handler of a body its route's model refuses: 400, its error object, pydantic's
    errors naming the field."""
    r = launched.post("/start_profile", body)
    assert r.status_code == 400, r.text
    answer = r.json()
    assert answer["object"] == "error" and answer["code"] == 400 and answer["type"] == "Bad Request", answer
    assert "validation error" in answer["message"] and repr(next(iter(body))) in answer["message"], answer
    generate(launched)
