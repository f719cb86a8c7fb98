"""The application's WAL options, read from its Spark conf.

One mapping for every process that opens an application's WALs: the running
engine (driver, receivers and file streams), a restarted driver (whose conf is
the checkpoint's) and ``walstream inspect`` (which reads the checkpoint's conf).
A WAL opened with other options would look for other topics and find nothing,
so these must never be read in two ways.
"""

from __future__ import annotations

from typing import Any

TOPIC_PREFIX_KEY = "spark.walstream.wal.topicPrefix"


def wal_options_from_conf(conf: dict[str, str]) -> dict[str, Any]:
    """Keyword options of :class:`~wal.KafkaWriteAheadLog` set by ``conf``; an
    option absent from ``conf`` keeps the WAL's default (none is invented here)."""
    options: dict[str, Any] = {}
    prefix = conf.get(TOPIC_PREFIX_KEY)
    if prefix:
        options["topic_prefix"] = prefix
    return options
