"""Per-engine entry points: thin, they only install the patches on import."""

import os


def disabled() -> bool:
    """``RLPROF_DISABLE=1`` turns every entry point off."""
    return os.environ.get("RLPROF_DISABLE", "").lower() in ("1", "true", "yes")
