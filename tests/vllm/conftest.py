import importlib

import pytest

from rlprof_plugins.patches import VLLM_PATCHES
from rlprof_plugins.patches.base import apply_guarded
from rlprof_plugins.patches.vllm.facts import version as vllm_version


@pytest.fixture
def vllm_patched():
    """Every vLLM patch applied to the real modules (as the plugin does)."""
    for patch in VLLM_PATCHES:
        if not patch.supports(vllm_version()):
            continue  # the env-era patches (vLLM < 0.13)
        assert apply_guarded(patch, importlib.import_module(patch.module), vllm_version()), patch.name
    yield
