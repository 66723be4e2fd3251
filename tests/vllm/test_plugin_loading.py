"""How the plugin gets into vLLM's processes, checked in fresh interpreters."""

import subprocess
import sys
from importlib.metadata import entry_points

import pytest


def run(code: str, **env) -> str:
    import os

    full_env = {k: v for k, v in os.environ.items() if k not in ("RLPROF_DISABLE", "VLLM_PLUGINS")}
    full_env.update(env)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


def test_entry_point_is_declared():
    eps = [ep for ep in entry_points(group="vllm.general_plugins") if ep.name == "rlprof"]
    assert len(eps) == 1 and eps[0].value == "rlprof_plugins.entry_points.vllm:register"


def test_register_imports_nothing_heavy():
    out = run(
        "import sys\n"
        "from rlprof_plugins.entry_points.vllm import register\n"
        "register(); register()\n"
        "print(sorted(m for m in ('torch', 'vllm', 'fastapi', 'numpy') if m in sys.modules))"
    )
    assert out == "[]"


BOOTSTRAP_CASES = [({}, "True"), ({"RLPROF_DISABLE": "1"}, "False"), ({"VLLM_PLUGINS": "other"}, "False"),
                   ({"VLLM_PLUGINS": "other,rlprof"}, "True")]
BOOTSTRAP_PROBE = ("import vllm.plugins, vllm.entrypoints.llm\n"
                   "import rlprof_plugins.entry_points as p\n"
                   "assert not vllm.plugins.plugins_loaded  # vLLM itself has not loaded plugins yet\n"
                   "print('vllm.general_plugins' in p._installed)")


def bootstrap_answers(cases: list) -> list[str]:
    """Each case's interpreter, all started at once (each mostly imports vLLM)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=len(cases)) as pool:
        return list(pool.map(lambda case: run(BOOTSTRAP_PROBE, **case[0]), cases))


def test_pth_bootstrap_registers_before_llm_is_used():
    """LLM(profiler_config={...}) filters keys before vLLM loads plugins; the
    .pth hook must have registered the plugin by the time the module exists (and not with rlprof disabled)."""
    cases = BOOTSTRAP_CASES[:2]
    assert bootstrap_answers(cases) == [answer for _, answer in cases]


# `make test-extended` (CI's 25 minutes: docs/testing.md): in CI, the allow-list's rule every loader reads it by
# (tests/unit/test_plugin_allow_list.py)
@pytest.mark.extended
def test_pth_bootstrap_follows_vllms_plugin_allow_list():
    """``VLLM_PLUGINS`` naming other plugins leaves rlprof out; naming it too keeps it in."""
    cases = BOOTSTRAP_CASES[2:]
    assert bootstrap_answers(cases) == [answer for _, answer in cases]
