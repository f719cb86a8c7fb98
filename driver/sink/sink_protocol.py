"""What KafkaSink writers and readers share: header names, errors and the
application's Kafka settings (the protocol itself is in driver/sink/kafka_sink.py)."""

from __future__ import annotations

import weakref
from typing import Any

from walstream.driver.errors import DriverError
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


class SinkError(DriverError):
    """Root of the errors :mod:`walstream.driver.sink.kafka_sink` raises on purpose."""


class SinkWriterError(SinkError):
    """A KafkaSink was asked to write with no writer identity: called outside a
    StreamingContext output operation and outside a ``foreachBatch`` query, with no
    ``writer=`` given. Without one, a re-run could not be told from another
    writer's output (driver/sink/output_writer.py)."""


class SinkReadLimitError(SinkError):
    """:func:`~walstream.driver.sink.kafka_sink.read_exactly_once` would buffer more uncommitted
    output than its bounds allow (one attempt's bytes, all attempts' bytes, or the
    number of open attempts). Nothing was yielded past the point it stopped; raise
    the named bound to read such a topic."""

    def __init__(self, bound: str, limit: int, detail: str) -> None:
        self.bound = bound
        self.limit = limit
        super().__init__(f"read_exactly_once: {detail} (over {bound}={limit})")


class SinkFenceError(SinkError):
    """A fence record could not be written and acknowledged in every partition of a
    sink topic within the timeout. Partitions already fenced stay fenced (a fence
    only voids older epochs' later attempts), so the fence can simply be retried."""

    def __init__(self, topic: str, epoch: int, detail: str) -> None:
        self.topic = topic
        self.epoch = epoch
        super().__init__(f"fence of epoch {epoch} on sink topic {topic!r} failed: {detail}")


class SinkTopicMissingError(SinkFenceError):
    """The sink topic does not exist, so it cannot be fenced. The fence never creates
    it: a topic made by a fence would take the broker's default partition count."""
