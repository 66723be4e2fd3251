"""The engines' plugin allow-lists (``VLLM_PLUGINS``, ``SGLANG_PLUGINS``), as rlprof reads them in every place it
loads (the entry points, the ``.pth`` bootstrap, ``rlprof doctor``): unset allows every plugin, as the engines
do; a list loads only the plugins it names. The bootstrap's own reading of ``VLLM_PLUGINS`` in a fresh
interpreter is ``tests/vllm/test_plugin_loading.py`` (``make test-extended``)."""

from __future__ import annotations

import pytest

from rlprof_plugins._env import allowed_by


@pytest.mark.parametrize("value,allowed", [(None, True), ("other", False), ("other,rlprof", True),
                                           (" other , rlprof ", True), ("", False), ("rlprof-extra", False)])
def test_a_list_loads_only_the_plugins_it_names(monkeypatch, value, allowed):
    for name in ("VLLM_PLUGINS", "SGLANG_PLUGINS"):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
        assert allowed_by(name) is allowed
