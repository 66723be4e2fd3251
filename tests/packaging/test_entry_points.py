"""setup.cfg's plugin entry points and the engine registry say the same thing.

The registry (``patches/engines.py``) names each engine's plugin group; setup.cfg
(static) names the module each group loads. Each group of the registry has its
``rlprof`` entry point, and that module installs exactly that group.
"""

import ast
import configparser
import importlib.util

from rlprof_plugins.patches.engines import REGISTRY
from tests.helpers.installed import REPO


def plugin_entry_points() -> dict[str, str]:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    out = {}
    for group, text in cfg["options.entry_points"].items():
        for line in filter(None, (x.strip() for x in text.splitlines())):
            name, _, target = (x.strip() for x in line.partition("="))
            if name == "rlprof" and group != "console_scripts":
                out[group] = target.split(":")[0]
    return out


def test_every_registered_group_has_its_entry_point_and_nothing_else():
    declared = plugin_entry_points()
    assert set(declared) == {e.plugin_group for e in REGISTRY}
    for group, module in declared.items():  # read, not imported: verl's entry point registers on import
        tree = ast.parse(open(importlib.util.find_spec(module).origin).read())
        assigned = {n.targets[0].id: ast.literal_eval(n.value) for n in tree.body
                    if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name) and n.targets[0].id == "GROUP"}
        assert assigned == {"GROUP": group}, module
