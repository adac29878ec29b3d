"""structlog setup: JSON lines when stderr is not a terminal, readable console output otherwise.

Called once by the command line before anything logs. Loggers are cached on first use (an
uncached structlog logger is rebuilt on every call, which costs more than a filtered call
should); the configuration is structlog's process-wide setting.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog


def configure(level: str = "info", stream: TextIO | None = None, json: bool | None = None) -> None:
    """Route structlog (and stdlib logging) to `stream` (stderr), JSON unless it is a TTY."""
    out = stream or sys.stderr
    use_json = not out.isatty() if json is None else json
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    processors: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.typing.Processor
    if use_json:
        processors += [structlog.processors.format_exc_info]
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[*processors, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(stream=out, level=max(numeric, logging.WARNING), format="%(message)s")
