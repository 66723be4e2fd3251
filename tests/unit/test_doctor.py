"""rlprof doctor: what it says without an engine, and from the declarations.
(On every tested release it runs for real in tests/compat.)"""

import importlib.util
import json

import pytest

from rlprof_plugins.cli import compatibility as compat
from rlprof_plugins.cli.command import main as rlprof
from rlprof_plugins.patches import ALL_PATCHES


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_engine_not_installed_exits_1_and_says_so(engine, capsys, monkeypatch):
    """Where the engine cannot be found (hidden from the doctor's lookup here,
    so the test runs in every environment, engines installed or not)."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == engine else real(name, *a))
    assert rlprof(["doctor", "--engine", engine]) == 1
    out, err = capsys.readouterr()
    assert "not installed" in out and "no supported engine" in err


def check_no_import_answers_from_the_declarations(engine, capsys):
    """Run where ``engine`` is installed: here for vLLM, in tests/sglang for SGLang."""
    assert rlprof(["doctor", "--engine", engine, "--no-import", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["engines"][0]
    version = report["version"]
    assert report["supported"] and report["ok"]
    assert {p["name"]: p["state"] for p in report["patches"]} == {
        p.name: "applies" if p.supports(version) else "off" for p in ALL_PATCHES if p.engine == engine}
    assert report["configure"] == compat.how_to_configure(engine, version)


def test_no_import_answers_from_the_declarations_vllm(capsys):
    check_no_import_answers_from_the_declarations("vllm", capsys)


def test_invalid_rlprof_profiler_config_is_pointed_out(monkeypatch):
    from rlprof_plugins.cli.doctor import _environment

    monkeypatch.setenv("RLPROF_PROFILER_CONFIG", '{"step_strat": 1}')
    monkeypatch.setenv("VLLM_TORCH_PROFILER_DIR", "/t")
    notes = _environment("vllm", "0.14.0")
    assert any("invalid" in n and "step_strat" in n for n in notes)
    assert any("override --profiler-config" in n for n in notes)
    assert any("removed in 0.16" in n for n in _environment("vllm", "0.20.0"))


def test_verl_is_reported_next_to_the_engines(capsys, monkeypatch):
    """Where verl is not installed (the unit environments): said, without failing the engines' report;
    alone (``--engine verl``) it is an error naming verl. Installed: tests/verl/contract_verl.py."""
    from rlprof_plugins.patches.verl import facts as trainer

    monkeypatch.setattr(trainer, "version", lambda: None)
    assert rlprof(["doctor", "--no-import", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["trainers"] == [
        {"trainer": "verl", "installed": False, "version": None, "supported": False, "tested": False,
         "untested_newer": None, "patches": [], "plugin_loading": "", "step_source": "", "configure": "",
         "ok": False}]
    assert rlprof(["doctor", "--engine", "verl"]) == 1
    out, err = capsys.readouterr()
    assert "verl: not installed" in out and "verl is not installed" in err


def test_backends_per_release_and_host(capsys):
    """Each release's backends and what picks them: cuda (Nsight Systems) from vLLM 0.13, where
    ``"profiler": "cuda"`` exists; on this CPU host its NVTX ranges only; npu without torch_npu: no."""
    from rlprof_plugins.cli.doctor_backends import backends

    on_032 = {b["backend"]: b for b in backends("vllm", "0.32.0")}
    assert on_032["cuda"]["available"] and "\"profiler\": \"cuda\"" in on_032["cuda"]["reason"]
    assert "NVTX ranges only" in on_032["cuda"]["reason"]  # torch sees no CUDA device here
    assert not on_032["npu"]["available"] and "torch_npu" in on_032["npu"]["reason"]
    env_era = {b["backend"]: b for b in backends("vllm", "0.12.0")}
    assert not env_era["cuda"]["available"] and "0.13" in env_era["cuda"]["reason"]
    assert "CUDA_PROFILER" in {b["backend"]: b for b in backends("sglang", "0.5.23")}["cuda"]["reason"]
    assert rlprof(["doctor", "--engine", "vllm", "--no-import"]) == 0
    out = capsys.readouterr().out
    assert "  backends:\n    [yes] torch: " in out and "    [yes] cuda: " in out


def test_the_stop_note_says_when_chunks_end_for_the_configuration_given():
    """``rlprof doctor``'s line on torch's stop follows the server's chunk keys: ``auto`` (the default, and with no
    configuration at all), a count, one session, each with the budget and pause the configuration sets."""
    from rlprof_plugins.cli.doctor import torch_stop_note
    from rlprof_plugins.config.launch_config import parse_profiler_config

    default = torch_stop_note(None)
    assert default == torch_stop_note(parse_profiler_config({}))
    assert "each busy stretch one chunk" in default and "1024 MB" in default and "max_pause_ms 200" in default
    tuned = torch_stop_note(parse_profiler_config({"max_recording_mb": 256, "max_pause_ms": 50}))
    assert "256 MB" in tuned and "chunks of 25 ms of predicted stop (max_pause_ms 50)" in tuned
    assert "a chunk every 8 iterations" in torch_stop_note(parse_profiler_config({"chunk_iterations": 8}))
    assert "one torch session per window" in torch_stop_note(parse_profiler_config({"chunk_iterations": 0}))
