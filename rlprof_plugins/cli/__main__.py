"""``python -m rlprof_plugins.cli``: the ``rlprof`` command."""

import sys

from .command import main

sys.exit(main())
