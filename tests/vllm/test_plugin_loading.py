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
    assert len(eps) == 1 and eps[0].value == "rlprof_plugins.plugins.vllm:register"


def test_register_imports_nothing_heavy():
    out = run(
        "import sys\n"
        "from rlprof_plugins.plugins.vllm import register\n"
        "register(); register()\n"
        "print(sorted(m for m in ('torch', 'vllm', 'fastapi', 'numpy') if m in sys.modules))"
    )
    assert out == "[]"


@pytest.mark.parametrize(
    "env, expected",
    [({}, "True"), ({"RLPROF_DISABLE": "1"}, "False"), ({"VLLM_PLUGINS": "other"}, "False"),
     ({"VLLM_PLUGINS": "other,rlprof"}, "True")],
)
def test_pth_bootstrap_registers_before_llm_is_used(env, expected):
    """LLM(profiler_config={...}) filters keys before vLLM loads plugins; the
    .pth hook must have registered the plugin by the time the module exists."""
    out = run(
        "import vllm.plugins, vllm.entrypoints.llm\n"
        "import rlprof_plugins.plugins as p\n"
        "assert not vllm.plugins.plugins_loaded  # vLLM itself has not loaded plugins yet\n"
        "print('VLLM_PATCHES' in p._installed)",
        **env,
    )
    assert out == expected
