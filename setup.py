"""The two things setup.cfg cannot declare: which packages ship, and ``rlprof_plugins.pth``.

Packages are found, never listed by hand (a hand-kept list once left
``rlprof_plugins.session`` out of the wheel, so a pip install loaded no patch):
the core is every package under ``rlprof_plugins/``; the top-level ``patches/``
folder and every package below it ship as ``rlprof_plugins.patches``, so the
engine patches sit beside the core in the source tree without claiming a
generic top-level import name. ``tests/packaging`` builds the wheel and fails
on any module of the tree it lacks.

A .pth file must sit at the top of site-packages; setuptools has no
declarative option for that. Regular wheels get it from build_py; editable
installs (``pip install -e``) from editable_wheel, which writes every file of
its staging folder into the wheel. Everything else is declared in setup.cfg
and pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

PTH = "rlprof_plugins.pth"
HERE = Path(__file__).resolve().parent
CORE = "rlprof_plugins"
PATCHES = (f"{CORE}.patches", "patches")  # (the package, the folder that holds it)


def packages() -> list[str]:
    """The core's packages and the engine patches', as shipped."""
    core = find_packages(str(HERE), include=[CORE, f"{CORE}.*"])
    name, folder = PATCHES
    below = find_packages(str(HERE / folder))
    return sorted(core + [name] + [f"{name}.{p}" for p in below])


class build_py_with_pth(build_py):
    def run(self):
        super().run()
        if not self.editable_mode:
            self.copy_file(str(HERE / PTH), str(Path(self.build_lib) / PTH), preserve_mode=0)

    def get_outputs(self, include_bytecode=True):
        outputs = super().get_outputs(include_bytecode)
        return outputs if self.editable_mode else outputs + [str(Path(self.build_lib) / PTH)]


class editable_wheel_with_pth(editable_wheel):
    # setuptools >= 64 calls this with the folder whose files become the wheel.
    def _install_namespaces(self, installation_dir, pth_prefix):
        super()._install_namespaces(installation_dir, pth_prefix)
        shutil.copyfile(HERE / PTH, Path(installation_dir) / PTH)


setup(
    packages=packages(),
    package_dir={PATCHES[0]: PATCHES[1]},
    cmdclass={"build_py": build_py_with_pth, "editable_wheel": editable_wheel_with_pth},
)
