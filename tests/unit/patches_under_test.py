"""A throw-away module with the shapes engine code has (class, subclass, function)."""

import types


def make_module() -> types.ModuleType:
    mod = types.ModuleType("fake_engine")

    class Engine:
        def run(self):
            return 1

    class Child(Engine):
        pass

    def helper():
        return 1

    mod.Engine, mod.Child, mod.helper = Engine, Child, helper
    return mod
