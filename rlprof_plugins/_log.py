"""One logger for the whole plugin, so users can filter it by name.

Its records reach the engine's own log: SGLang configures the root logger
(its format, ``--log-level``), which ``rlprof`` propagates to; vLLM logs
through its ``vllm`` logger, which does not propagate, so the vLLM plugin
forwards ``rlprof`` records to it (``join_engine_log``) at the level
``VLLM_LOGGING_LEVEL`` gives it.
"""

import logging

logger = logging.getLogger("rlprof")


class _ToEngineLogger(logging.Handler):
    """Hands each record to the engine logger's own handlers (its format), if
    the engine logger's level, as configured by then, lets it through."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.engine_logger = name

    def emit(self, record: logging.LogRecord) -> None:
        engine = logging.getLogger(self.engine_logger)
        if not engine.isEnabledFor(record.levelno):
            return
        for handler in engine.handlers:  # not engine.handle(): no second trip through the root's handlers
            if record.levelno >= handler.level:
                handler.handle(record)


def join_engine_log(engine_logger: str) -> None:
    """Show rlprof's lines in the engine's log, as the engine shows its own (once per process).

    The engine configures its logger after plugins load, so its level is read
    per record; ``rlprof`` itself lets INFO through (vLLM's default level)."""
    if any(isinstance(h, _ToEngineLogger) for h in logger.handlers):
        return
    logger.addHandler(_ToEngineLogger(engine_logger))
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)


def session_event(action: str, result: dict) -> None:
    """One line per session start or stop, naming the step and its folder."""
    logger.info("rlprof: profiling %s: global step %s, state %s, folder %s", action, result.get("global_step"),
                result.get("state"), result.get("directory"), stacklevel=2)


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
