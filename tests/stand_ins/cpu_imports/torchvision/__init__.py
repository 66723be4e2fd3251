"""Import-only stand-in for `torchvision` (test scaffolding; see tests/stand_ins/README.md)."""

import sys as _sys

from _import_only import install as _install

# transformers reads the version when it finds the package; 0.0.0 keeps it off
# every torchvision-only fast path (nothing here can run).
__version__ = "0.0.0"

_install(_sys.modules[__name__])
