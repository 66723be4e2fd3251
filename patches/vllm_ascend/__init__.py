"""vllm-ascend's patches: the patch modules, and the helpers they share.

A patch module is named in ``PATCH_MODULES`` (in the order the registry,
``patches/engines.py``, installs them), declares ``PATCHES``, is named for
the engine module it patches and says in its docstring which process that
runs in. Every other module here is a helper: it declares no patch
(``facts``: what the patches rely on in vllm-ascend, declared once). A patch module
imports helpers and the core, never another patch module; a helper never
imports a patch module (``tests/unit/test_layers.py``).
"""

PATCH_MODULES = ('worker',)
