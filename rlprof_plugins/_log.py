"""One logger for the whole plugin, so users can filter it by name."""

import logging

logger = logging.getLogger("rlprof")


def warn_once(key: str, msg: str, *args: object) -> None:
    """Log a warning at most once per process for ``key``.

    Patches run in every engine process and may be re-applied; a feature that
    cannot apply must say so once, not on every request.
    """
    if key in _warned:
        return
    _warned.add(key)
    logger.warning(msg, *args)


_warned: set[str] = set()
