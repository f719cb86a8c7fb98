"""DirectKafkaInputDStream: Kafka without a receiver, each batch an offset range.

Protocol per batch ``t`` (before the tracker allocates ``t``):

1. Find each partition's end: fetch once from the previous end and take the
   high watermark that Fetch response carries (ListOffsets' high watermark is
   wrong on the embedded Tansu broker).
2. Log the ranges ``[position, end)`` as a block of this stream in the tracker
   WAL (BlockAddition); the allocation of ``t`` then names it.
3. The batch's RDD reads exactly those ranges, one partition per range. A
   re-run after a crash replays the allocation and reads the same ranges:
   exactly once, with output that is idempotent per batch.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from walstream.driver.dstream.driver_read_inputs import DriverReadInputDStream
from walstream.driver.errors import StreamClosedError
from walstream.driver.scheduler.wal_conf import kafka_settings_of
from walstream.kafka_logging import with_logger
from walstream.receiver.block import SourceRange
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.wal.handle import RecordHandle
from walstream.wal.reader import FETCH_WAIT_MS
from walstream.worker_heap import freeze_once

if TYPE_CHECKING:
    from walstream.driver.dstream.streaming_context import StreamingContext

log = logging.getLogger(__name__)


#: kafkaParams a direct stream's consumers never take: the cluster is the stream's
#: bootstrap, and each consumer sets what its reading by offset rests on.
_OWN_KEYS = ("bootstrap.servers", "metadata.broker.list", "group.id", "enable.auto.commit",
             "enable.partition.eof", "auto.offset.reset", "zookeeper.connect",
             "zookeeper.connection.timeout.ms")


def consumer_conf(bootstrap: str, settings: dict[str, Any], params: dict[str, Any],
                  own: dict[str, Any]) -> dict[str, Any]:
    """A direct-stream consumer's settings: the application's Kafka settings, then the
    stream's ``kafkaParams``, then what this consumer's reading rests on (``own``)."""
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "fetch.wait.max.ms": FETCH_WAIT_MS}
    conf.update(settings)
    conf.update({k: v for k, v in params.items() if k not in _OWN_KEYS})
    conf.update(own)
    return conf


def _read_range(bootstrap: str, params: dict[str, Any], key_decoder: Any, value_decoder: Any,
                bad: Any, ranges: Iterator[tuple[str, int, int, int]]) -> Iterator[Any]:
    """Runs in a PySpark task: the records of ``[from, until)`` of each given range.

    ``params`` are the consumer's settings over the defaults (the application's Kafka
    settings and the stream's kafkaParams). A record the decoders reject is skipped,
    logged with its position and counted in the accumulator ``bad`` (the stream's
    ``undecodable``), as a Kafka receiver skips and reports it."""
    freeze_once()
    conf = consumer_conf(bootstrap, params, {}, {
        "group.id": "walstream-direct-reader", "enable.auto.commit": False,
        "enable.partition.eof": True, "auto.offset.reset": "error"})
    consumer = Consumer(with_logger(conf))
    try:
        for topic, partition, start, until in ranges:
            if until <= start:
                continue
            consumer.assign([TopicPartition(topic, partition, start)])
            pos = start
            while pos < until:
                msg = consumer.poll(30)
                if msg is None:
                    raise TimeoutError(f"{topic}[{partition}] gave nothing at offset {pos}")
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"{topic}[{partition}] ended at {pos} < {until}")
                    raise RuntimeError(str(err))
                pos = int(msg.offset() or 0) + 1
                try:
                    item = (key_decoder(msg.key()), value_decoder(msg.value()))
                except Exception as exc:
                    # The receiver's policy, in the task: report (the executor's log
                    # and the stream's counter), skip, go on.
                    log.warning("direct stream: undecodable record at %s[%d]@%d skipped: %s",
                                topic, partition, pos - 1, exc)
                    if bad is not None:
                        bad.add(1)
                    continue
                yield item
    finally:
        consumer.close()


class DirectKafkaInputDStream(DriverReadInputDStream):
    def __init__(self, ssc: StreamingContext, topics: list[str], bootstrap: str,
                 params: dict[str, Any], from_offsets: dict[Any, int],
                 key_decoder: Callable[[bytes | None], Any],
                 value_decoder: Callable[[bytes | None], Any]) -> None:
        super().__init__(ssc, ssc._batch_ms, [], "kafkaDirect")
        self.stream_id = ssc._next_receiver_id()
        self.topics = topics
        self.bootstrap = bootstrap
        self.params = params
        self.from_offsets = {(str(k[0]), int(k[1])) if isinstance(k, tuple)
                             else (str(k.topic), int(k.partition)): int(v)
                             for k, v in from_offsets.items()}
        self.key_decoder = key_decoder
        self.value_decoder = value_decoder
        self._positions: dict[tuple[str, int], int] | None = None
        self._consumer: Consumer | None = None
        # Held while the probe consumer is used, and by close(): librdkafka must not
        # see close() while another thread polls the same handle (that crashes the
        # process). A non-graceful stop can close while a batch is still probing.
        self._lock = threading.Lock()
        self._closed = False
        self._bad: Any = None  # accumulator of undecodable records skipped (this run)
        self._ends: dict[tuple[str, int], int] = {}  # each partition's end, last probed

    @property
    def undecodable(self) -> int:
        """Records the decoders rejected and batches skipped, in this driver's run
        (a re-run batch counts its records again)."""
        return int(self._bad.value) if self._bad is not None else 0

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.update(_consumer=None, _positions=None, _bad=None,  # positions: from the tracker
                     _lock=None, _closed=False, _ends={})
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._lock = threading.Lock()
        self._ends = dict(state.get("_ends") or {})

    def _probe(self) -> Consumer:
        """The driver's probe consumer; the caller holds ``self._lock``."""
        if self._closed:
            raise StreamClosedError(f"direct stream {self.stream_id} is closed (context stopped)")
        if self._consumer is None:
            self._consumer = Consumer(with_logger(consumer_conf(
                self.bootstrap, self._kafka_settings(), self.params,
                {"group.id": "walstream-direct-probe", "enable.auto.commit": False,
                 "enable.partition.eof": True})))
        return self._consumer

    def _kafka_settings(self) -> dict[str, str]:
        """The application's Kafka settings (taken from the running engine, never
        kept on the stream: the stream goes into checkpoints)."""
        engine = self._ssc._engine
        return kafka_settings_of(engine.config.wal_options) if engine is not None else {}

    def log_ends(self) -> dict[tuple[str, int], int]:
        """Each source partition's end offset as the last batch's probe found it."""
        return dict(self._ends)

    def close(self) -> None:
        """Close the driver's probe consumer (the context stopped). Left open, it would
        keep following the topics' metadata after the stop, holding its threads."""
        self._closed = True  # a batch still probing stops at its next partition
        # A probe holds the lock for at most one poll (10 s) per partition.
        if not self._lock.acquire(timeout=60):
            log.error("direct stream %s: a probe still runs after 60 s; its consumer is "
                      "left open rather than closed under it", self.stream_id)
            return
        try:
            consumer, self._consumer = self._consumer, None
            if consumer is not None:
                consumer.close()
        finally:
            self._lock.release()

    def _end_offset(self, topic: str, partition: int, at_least: int) -> int:
        """The partition's end now (a batch's until-offset), at least ``at_least``.

        ListOffsets' high watermark is wrong on the embedded Tansu broker,
        the high watermark in a Fetch response is right everywhere: fetch once from
        ``at_least`` and take the watermark that fetch brought back, instead of
        reading to the end (which, while producers write, chases a moving end).
        """
        with self._lock:
            return self._end_offset_locked(topic, partition, at_least)

    def _end_offset_locked(self, topic: str, partition: int, at_least: int) -> int:
        consumer = self._probe()
        tp = TopicPartition(topic, partition)
        # From the previous end, a real offset: on the durable embedded broker a
        # fetch at the base of the last batch (what ListOffsets reports) gave nothing.
        consumer.assign([TopicPartition(topic, partition, at_least if at_least > 0
                                        else OFFSET_BEGINNING)])
        msg = consumer.poll(10)
        if msg is None:
            raise TimeoutError(f"no answer reading the end of {topic}[{partition}]")
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                return max(at_least, int(msg.offset() or 0))
            raise RuntimeError(f"{topic}[{partition}]: {err}")
        _, fetched = consumer.get_watermark_offsets(tp, cached=True)
        return max(at_least, int(fetched), int(msg.offset() or 0) + 1)

    def _start_positions(self) -> dict[tuple[str, int], int]:
        engine = self._ssc._engine
        assert engine is not None
        acked = {(r.topic, r.partition): r.until_offset
                 for r in engine.tracker.positions(self.stream_id)}
        with self._lock:
            md = self._probe().list_topics(timeout=30)
        out = {}
        reset = str(self.params.get("auto.offset.reset", "largest")).lower()
        for topic in self.topics:
            if topic not in md.topics:
                raise RuntimeError(f"topic {topic!r} does not exist")
            for p in sorted(md.topics[topic].partitions):
                key = (topic, p)
                if key in acked:
                    out[key] = acked[key]
                elif key in self.from_offsets:
                    out[key] = self.from_offsets[key]
                elif reset in ("smallest", "earliest"):
                    out[key] = 0
                else:
                    out[key] = self._end_offset(topic, p, 0)
        return out

    def before_allocate(self, t: int) -> None:
        """Step 1 and 2: decide batch ``t``'s ranges and log them."""
        engine = self._ssc._engine
        assert engine is not None
        last = engine.tracker.last_allocated_batch_time_ms
        if last is not None and t <= last:
            # A re-run after a restart: t's ranges are logged already and it reads
            # those; new data waits for the next new batch.
            return
        if self._positions is None:
            self._positions = self._start_positions()
        ranges = []
        for (topic, p), start in sorted(self._positions.items()):
            end = self._end_offset(topic, p, start)
            ranges.append(SourceRange(topic, p, start, end))
            self._ends[(topic, p)] = end
        count = sum(r.until_offset - r.from_offset for r in ranges)
        # Unique per range, not per batch time: a block id logged twice would move
        # the first block out of its batch when the second is allocated (the
        # tracker's SPARK-5233 rule), and the first range's records would be lost.
        first = ranges[0].from_offset if ranges else 0
        info = ReceivedBlockInfo(self.stream_id, f"direct-{self.stream_id}-{t}-{first}", count,
                                 RecordHandle(f"direct.{self.stream_id}", 0, 0), tuple(ranges))
        if engine.tracker.add_block(info):
            for r in ranges:
                self._positions[(r.topic, r.partition)] = r.until_offset

    def compute(self, t: int) -> Any:
        engine = self._ssc._engine
        assert engine is not None
        sc = self._ssc.sparkContext
        ranges = [(r.topic, r.partition, r.from_offset, r.until_offset)
                  for b in engine.tracker.get_blocks_of_batch_and_stream(t, self.stream_id)
                  for r in b.source if r.until_offset > r.from_offset]
        if not ranges:
            return sc.emptyRDD()
        if self._bad is None:
            self._bad = sc.accumulator(0)
        params = {**self._kafka_settings(),
                  **{k: v for k, v in self.params.items() if k not in _OWN_KEYS}}
        reader = functools.partial(_read_range, self.bootstrap, params, self.key_decoder,
                                   self.value_decoder, self._bad)
        return sc.parallelize(ranges, len(ranges)).mapPartitions(reader)
