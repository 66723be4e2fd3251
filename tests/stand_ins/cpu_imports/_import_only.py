"""Import-only modules: every attribute exists, calling anything fails loudly.

Shared by the torchvision and sgl_kernel stand-ins (test scaffolding, see
tests/stand_ins/README.md). A finder serves every submodule of a stand-in
package, so ``import torchvision.transforms.v2.functional as F`` works.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types


class Missing:
    """Any attribute of a stand-in module: chainable, subscriptable, never callable."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, item: str) -> "Missing":
        if item.startswith("__"):
            raise AttributeError(item)
        return Missing(f"{self._name}.{item}")

    def __getitem__(self, item) -> "Missing":
        return Missing(f"{self._name}[{item!r}]")

    def __call__(self, *args, **kwargs):
        raise ImportError(f"{self._name} is an import-only test stand-in (no CPU build on PyPI)")

    def __repr__(self) -> str:
        return f"<stand-in {self._name}>"


class StandInModule(types.ModuleType):
    def __getattr__(self, item: str):
        if item.startswith("__"):
            raise AttributeError(item)
        return Missing(f"{self.__name__}.{item}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, root: str) -> None:
        self.root = root

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(self.root + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = StandInModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def install(package: types.ModuleType) -> None:
    """Make ``package`` an import-only stand-in with stand-in submodules."""
    package.__class__ = StandInModule
    sys.meta_path.append(_Finder(package.__name__))
