"""``spark.walstream.log.format``: the project's Python logging as text or JSON lines.

``text`` (the default) leaves logging as the application configured it. ``json``
gives the project's logger (:data:`PROJECT_LOGGERS`: ``walstream``, the parent of
every module's logger, librdkafka's lines under ``walstream.kafka`` among them) one
handler writing one JSON object per record to standard
error, for log shippers::

    {"time": "YYYY-MM-DDThh:mm:ss.mmmZ", "level": "INFO",
     "logger": "walstream.driver.scheduler.restart_log", "message": "...", "exc": null}

``exc`` is the formatted traceback of a record logged with one, else null. Those
loggers then stop propagating, so a record is written once, as JSON, and not
again by the root logger's handlers; the application's own loggers are left as
they are. Levels stay the application's (``logging.getLogger("walstream.driver")`` and so
on). Applying is idempotent, and applying ``text`` afterwards undoes ``json``.
:func:`apply_log_format` is called by ``StreamingContext.start`` with the
context's Spark conf.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Mapping
from typing import IO, Any

from walstream.errors import ConfigError

CONF_KEY = "spark.walstream.log.format"
FORMATS = ("text", "json")
#: The loggers every module of the project logs under (``logging.getLogger(__name__)``).
PROJECT_LOGGERS = ("walstream",)


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601, milliseconds), level, logger,
    message (its arguments merged in), exc (traceback or null)."""

    def format(self, record: logging.LogRecord) -> str:
        exc = None
        if record.exc_info:
            exc = self.formatException(record.exc_info)
        elif record.exc_text:
            exc = record.exc_text
        obj: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "exc": exc,
        }
        if record.stack_info:
            obj["stack"] = self.formatStack(record.stack_info)
        return json.dumps(obj, ensure_ascii=False, default=str)


class _JsonHandler(logging.StreamHandler[IO[str]]):
    """The handler :func:`apply_log_format` installs (told apart from the app's own);
    it keeps its logger's ``propagate`` from before, to put back on removal."""

    def __init__(self, stream: IO[str], previous_propagate: bool) -> None:
        super().__init__(stream)
        self.previous_propagate = previous_propagate


def log_format_of(conf: Mapping[str, str]) -> str:
    """The configured format; :class:`ConfigError` for an unknown one."""
    value = conf.get(CONF_KEY, "text").strip().lower()
    if value not in FORMATS:
        raise ConfigError(f"{CONF_KEY}={conf.get(CONF_KEY)!r}: expected one of "
                          f"{', '.join(FORMATS)}")
    return value


def apply_log_format(conf: Mapping[str, str], stream: IO[str] | None = None) -> str:
    """Make the project's loggers write ``conf``'s format (to ``stream``, default
    standard error); returns the format applied."""
    fmt = log_format_of(conf)
    for name in PROJECT_LOGGERS:
        logger = logging.getLogger(name)
        for h in [h for h in logger.handlers if isinstance(h, _JsonHandler)]:
            logger.removeHandler(h)
            logger.propagate = h.previous_propagate
        if fmt == "json":
            handler = _JsonHandler(stream if stream is not None else sys.stderr,
                                   logger.propagate)
            handler.setFormatter(JsonFormatter())
            logger.addHandler(handler)
            logger.propagate = False
    return fmt
