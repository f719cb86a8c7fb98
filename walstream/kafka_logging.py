"""librdkafka's log lines go through Python ``logging``, for every client the project makes.

Without a ``logger`` in its configuration, librdkafka writes its own lines to
stderr (``%3|1700000000.123|FAIL|rdkafka#producer-1| ...``), past any logging
configuration the application set. Every Producer, Consumer and AdminClient
the project creates takes its configuration through :func:`with_logger`, so
those lines reach the logger ``walstream.kafka`` instead, where the
application's handlers, levels and filters apply.

Levels: confluent-kafka maps librdkafka's syslog levels onto Python's (3 is
ERROR, 4 WARNING, 5-6 INFO, 7 DEBUG). One class of line is moved down to INFO:
a broker connection refused, dropped, reset or timed out, and "N/N brokers are
down". Those happen on every broker start, stop and restart, librdkafka
reconnects by itself, and an outage that lasts surfaces where it matters, as
the typed error of the WAL write, read or admin call that could not complete.
Everything else keeps its level, so an authentication, TLS or name-resolution
failure still shows as an error.

The lines are handed over when the client is polled (confluent-kafka queues
them for the thread that calls ``poll``), never from librdkafka's own threads.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

LOGGER_NAME = "walstream.kafka"

# Connection-state lines that a broker restart produces and librdkafka retries.
# Security and resolution failures are deliberately absent: they are errors.
_TRANSPORT = re.compile(
    r"Connection refused|Disconnected|Connection reset|Broken pipe"
    r"|Connection setup timed out|connection timed out|timed out in state CONNECT"
    r"|brokers are down|Broker transport failure",
    re.IGNORECASE,
)
_SECURITY = re.compile(r"SASL|SSL|authenticat", re.IGNORECASE)


def is_transport_noise(text: str) -> bool:
    """True for a connection-state line that a broker start, stop or restart explains."""
    return bool(_TRANSPORT.search(text)) and not _SECURITY.search(text)


class KafkaClientLogger:
    """The ``logger`` object handed to confluent-kafka clients.

    confluent-kafka calls ``log(level, "%s [%s] %s", facility, client, text)``;
    this forwards to :data:`LOGGER_NAME` with transport noise lowered to INFO.
    """

    def __init__(self, name: str = LOGGER_NAME) -> None:
        self._logger = logging.getLogger(name)

    @property
    def name(self) -> str:
        return self._logger.name

    def log(self, level: int, msg: str, *args: Any, **kwargs: Any) -> None:
        try:
            text = msg % args if args else msg
        except (TypeError, ValueError):
            text = " ".join([msg, *map(str, args)])
        if level > logging.INFO and is_transport_noise(text):
            level = logging.INFO
        if self._logger.isEnabledFor(level):
            self._logger.log(level, "%s", text)


_SHARED = KafkaClientLogger()


def with_logger(conf: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a confluent-kafka client configuration that logs through ``logging``.

    An application's own ``logger`` entry wins. The entry is added here, at
    construction, and never stored in configuration objects, which are pickled
    into Spark tasks.
    """
    out = dict(conf)
    out.setdefault("logger", _SHARED)
    return out
