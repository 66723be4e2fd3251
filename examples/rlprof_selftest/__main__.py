"""``python -m rlprof_selftest``: the self-test's command line (``rlprof_selftest.main``)."""

import sys

from . import main

sys.exit(main())
