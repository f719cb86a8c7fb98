"""The application's WAL options, read from its Spark conf.

One mapping for every process that opens an application's WALs: the running
engine (driver, receivers and file streams), a restarted driver (whose conf is
the checkpoint's) and ``walstream inspect`` (which reads the checkpoint's conf).
A WAL opened with other options would look for other topics and find nothing,
so these must never be read in two ways.
"""

from __future__ import annotations

from typing import Any

from walstream.kafka_settings import settings_from_conf

TOPIC_PREFIX_KEY = "spark.walstream.wal.topicPrefix"
COMPRESSION_KEY = "spark.walstream.wal.compression"


def wal_options_from_conf(conf: dict[str, str]) -> dict[str, Any]:
    """Keyword options of :class:`~wal.KafkaWriteAheadLog` set by ``conf``; an
    option absent from ``conf`` keeps the WAL's default (none is invented here).
    The application's Kafka settings (``spark.walstream.kafka.*``) are every WAL
    client's ``client_config``: they may hold secrets, so show these options
    only through :func:`walstream.kafka_settings.redacted`."""
    options: dict[str, Any] = {}
    prefix = conf.get(TOPIC_PREFIX_KEY)
    if prefix:
        options["topic_prefix"] = prefix
    compression = conf.get(COMPRESSION_KEY, "").strip().lower()
    if compression:
        options["compression"] = compression  # KafkaWalConfig names a bad one
    settings = settings_from_conf(conf)
    if settings:
        options["client_config"] = settings
    return options


def kafka_settings_of(wal_options: dict[str, Any]) -> dict[str, str]:
    """The application's Kafka settings, as :func:`wal_options_from_conf` carries them:
    what every other client of the cluster (block reads, direct streams) applies."""
    return dict(wal_options.get("client_config", {}))
