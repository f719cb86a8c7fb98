"""Errors of the exactly-once Kafka sink (:mod:`walstream.driver.sink`)."""

from __future__ import annotations

from walstream.driver.errors import DriverError


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
