"""What KafkaSink writers and readers share: header names, errors and the
application's Kafka settings (the protocol itself is in driver/sink/kafka_sink.py)."""

from __future__ import annotations

import weakref
from typing import Any

from walstream.kafka_settings import settings_from_conf

H_BATCH, H_PART, H_ATTEMPT, H_SEQ, H_COMMIT = (
    "walstream.batch", "walstream.part", "walstream.attempt", "walstream.seq",
    "walstream.commit")
H_EPOCH, H_FENCE, H_WRITER = "walstream.epoch", "walstream.fence", "walstream.writer"

# A SparkContext's conf does not change once it runs: its settings are read once.
_SETTINGS: weakref.WeakKeyDictionary[Any, dict[str, str]] = weakref.WeakKeyDictionary()


def app_kafka_settings(sc: Any = None) -> dict[str, str]:
    """The Kafka settings of ``sc``'s conf (default: the running SparkContext's);
    empty when no SparkContext runs."""
    if sc is None:
        from pyspark import SparkContext

        sc = SparkContext._active_spark_context
        if sc is None:
            return {}
    settings = _SETTINGS.get(sc)
    if settings is None:
        settings = _SETTINGS[sc] = settings_from_conf(dict(sc.getConf().getAll()))
    return dict(settings)


