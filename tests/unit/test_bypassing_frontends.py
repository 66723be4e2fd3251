"""Frontends that bypass the patched API servers (issue 36): declared per engine, said once per process.

The real frontends run in tests/e2e/test_bypassing_frontends.py (vLLM 0.33's
Rust frontend before the 0.32 CPU engine, SGLang 0.5.23's gRPC mode and Rust
server); this checks the declarations and the one-warning rule.
"""

import logging

from rlprof_plugins import _log
from rlprof_plugins.cli.doctor import render, EngineReport
from rlprof_plugins.patches.bypassing_frontends import Frontend, warn_in_use
from rlprof_plugins.patches.sglang import facts as sglang
from rlprof_plugins.patches.vllm import facts as vllm

RUST = vllm.FRONTENDS[0]


def test_each_engine_declares_the_variable_that_turns_it_on():
    assert [(f.variable, f.chosen_by) for f in vllm.FRONTENDS] == [("VLLM_USE_RUST_FRONTEND",
                                                                    "VLLM_USE_RUST_FRONTEND=1")]
    assert [f.variable for f in sglang.FRONTENDS] == ["RLPROF_SGLANG_GRPC_MODE", "SGLANG_RUST_SERVER"]
    assert RUST.exists_in("0.33.0") and RUST.exists_in("0.32.0") and not RUST.exists_in("0.24.0")
    assert sglang.FRONTENDS[1].exists_in("0.5.23") and not sglang.FRONTENDS[1].exists_in("0.5.15")


def test_in_use_reads_the_variable_as_the_engines_do():
    assert RUST.in_use({"VLLM_USE_RUST_FRONTEND": "1"}) and RUST.in_use({"VLLM_USE_RUST_FRONTEND": "true"})
    for off in ({}, {"VLLM_USE_RUST_FRONTEND": "0"}, {"VLLM_USE_RUST_FRONTEND": ""},
                {"VLLM_USE_RUST_FRONTEND": "false"}):
        assert not RUST.in_use(off)


def test_one_warning_per_process_naming_the_frontend_the_variable_and_what_works(caplog, monkeypatch):
    monkeypatch.setattr(_log, "_warned", set())
    env = {"VLLM_USE_RUST_FRONTEND": "1"}
    with caplog.at_level(logging.WARNING, logger=_log.logger.name):
        for _ in range(3):  # every patch group's install, every re-load: said once
            assert warn_in_use("vLLM", vllm.FRONTENDS, lambda: "0.33.0", env) == [RUST]
    [record] = [r for r in caplog.records if "serves through" in r.getMessage()]
    message = record.getMessage()
    assert "vLLM's Rust frontend (vllm-rs)" in message and "VLLM_USE_RUST_FRONTEND=1" in message
    assert "Still works:" in message and "step_source" in message and "GET /profile_status" in message


def test_no_warning_where_the_release_has_no_such_frontend_or_it_is_off(caplog, monkeypatch):
    monkeypatch.setattr(_log, "_warned", set())
    with caplog.at_level(logging.WARNING, logger=_log.logger.name):
        warn_in_use("vLLM", vllm.FRONTENDS, lambda: "0.24.0", {"VLLM_USE_RUST_FRONTEND": "1"})
        warn_in_use("vLLM", vllm.FRONTENDS, lambda: "0.33.0", {})
    assert not [r for r in caplog.records if "serves through" in r.getMessage()]


def test_doctor_names_each_frontend_of_the_release():
    frontend = Frontend("a frontend", "X=1", "X", ">=1", "this works", "that does not")
    report = EngineReport(engine="vllm", installed=True, version="0.33.0", location="/x", supported=True,
                          frontends=[{"frontend": frontend.name, "chosen_by": frontend.chosen_by, "in_release": True,
                                      "in_use": True, "works": frontend.works, "lacks": frontend.lacks}])
    text = render(report)
    assert "frontend a frontend (X=1): IN USE here" in text and "Works: this works" in text
