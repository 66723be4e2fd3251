"""The two things setup.cfg cannot declare: which packages ship, and ``rlprof_plugins.pth``.

Packages are found, never listed by hand (a hand-kept list once left
``rlprof_plugins.session`` out of the wheel, so a pip install loaded no patch):
every package under ``rlprof_plugins/``, the engine patches in
``rlprof_plugins/patches/`` included. ``tests/packaging`` builds the wheel and
fails on any module of the tree it lacks.

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
PACKAGE = "rlprof_plugins"


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
    packages=sorted(find_packages(str(HERE), include=[PACKAGE, f"{PACKAGE}.*"])),
    cmdclass={"build_py": build_py_with_pth, "editable_wheel": editable_wheel_with_pth},
)
