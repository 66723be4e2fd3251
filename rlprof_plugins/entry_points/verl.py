"""The ``verl.plugins`` entry point.

verl imports each entry point of that group when ``verl`` is imported (in
the trainer and in every Ray actor process that unpickles a verl class) and
calls nothing, so this module registers on import. It only registers
post-import hooks for verl's rollout server modules
(``patches/verl/servers.py``); the engine's own plugin does the profiling.
``RLPROF_DISABLE=1`` turns it off, as does leaving ``rlprof`` out of
``VERL_USE_EXTERNAL_PLUGINS``.
"""

from __future__ import annotations

from . import install_group

GROUP = "verl.plugins"  # setup.cfg's group for this module; patches/engines.py lists what it installs


def register() -> None:
    install_group(GROUP)


register()
