"""Import-only stand-in for `sgl_kernel` (test scaffolding; see tests/stand_ins/README.md)."""

import sys as _sys

from _import_only import install as _install

_install(_sys.modules[__name__])
