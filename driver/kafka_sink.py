"""KafkaSink: exactly-once Kafka output for ``foreachRDD``, by attempt and commit marker.

A batch re-run after a driver crash (its output may have run before the crash)
writes its records again; a plain producer would double them. Transactions
would fence that, but the embedded Tansu broker's ``read_committed`` still
shows aborted records, so the protocol is one any broker supports:

1. ``KafkaSink(...)`` is a ``foreachRDD`` function ``f(time, rdd)``. Each RDD
   partition is written by its Spark task as one *attempt*: a fresh attempt id,
   then the records, each with headers ``walstream.batch`` (batch time ms),
   ``walstream.part`` (partition index), ``walstream.attempt`` and
   ``walstream.seq``; all to one Kafka partition chosen by ``(batch, part)``,
   so an attempt's records and its marker keep their order.
2. After every record is acknowledged (``acks=all``, idempotent producer), the
   task writes a *commit marker* (header ``walstream.commit`` = record count)
   and waits for its acknowledgement. A task killed before that leaves an
   attempt with no marker, which readers ignore.
3. :func:`read_exactly_once` yields, for each ``(batch, part)``, the records of
   the first attempt whose marker it reads with every sequence number below the
   marker's count, and skips every other attempt, so re-runs replace rather than
   add. A record stored twice (a producer retry the broker did not deduplicate)
   has its attempt's sequence number again and is read once, so it neither
   doubles the output nor makes its attempt look torn. Records are keyed
   ``<batch>-<part>-<seq>`` unless a key function is given, so a compacted
   topic converges to one copy for plain consumers too.

Memory of the reader is bounded by the attempts not yet committed it has seen.

Both take the application's Kafka settings (``spark.walstream.kafka.*``: SASL,
TLS, ...) from the running SparkContext's conf, under a sink's own
``producer_config``; the sink never keeps them, since it goes into checkpoints
with the graph.
"""

from __future__ import annotations

import functools
import json
import uuid
import weakref
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from walstream.errors import ConfigError
from walstream.kafka_logging import with_logger
from walstream.kafka_settings import settings_from_conf

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

H_BATCH, H_PART, H_ATTEMPT, H_SEQ, H_COMMIT = (
    "walstream.batch", "walstream.part", "walstream.attempt", "walstream.seq",
    "walstream.commit")


def _to_bytes(x: Any) -> bytes | None:
    if x is None or isinstance(x, bytes):
        return x
    if isinstance(x, str):
        return x.encode("utf-8")
    return json.dumps(x, separators=(",", ":")).encode()


class KafkaSink:
    """``dstream.foreachRDD(KafkaSink(bootstrap, topic))``: exactly-once output.

    ``value`` turns an element into the record value (default: bytes as they
    are, str as UTF-8, anything else as JSON); ``key`` into its key (default
    ``<batch>-<part>-<seq>``). ``partitions`` is the topic's partition count
    (records of one attempt go to one partition; default 1).
    """

    def __init__(self, bootstrap_servers: str, topic: str,
                 value: Callable[[Any], Any] | None = None,
                 key: Callable[[Any], Any] | None = None,
                 partitions: int = 1, timeout_s: float = 60.0,
                 producer_config: dict[str, Any] | None = None) -> None:
        if partitions < 1:
            raise ConfigError("partitions must be >= 1")
        if not 0 < timeout_s <= 3600:
            raise ConfigError("timeout_s must be in (0, 3600]")
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.value = value
        self.key = key
        self.partitions = partitions
        self.timeout_s = timeout_s
        self.producer_config = dict(producer_config or {})

    def __call__(self, time: datetime, rdd: Any) -> None:
        batch_ms = round(time.timestamp() * 1000)
        writer = functools.partial(self.write_partition,
                                   kafka_settings=app_kafka_settings(rdd.context))
        rdd.mapPartitionsWithIndex(
            lambda part, items: [writer(batch_ms, part, items)]).collect()

    def write_partition(self, batch_ms: int, part: int, items: Any,
                        kafka_settings: Mapping[str, str] | None = None) -> int:
        """Steps 1-2 for one partition (runs in the Spark task); returns its count."""
        from confluent_kafka import KafkaException, Producer

        conf = {"bootstrap.servers": self.bootstrap_servers, "linger.ms": 5,
                "delivery.timeout.ms": int(self.timeout_s * 1000), **(kafka_settings or {}),
                **self.producer_config, "acks": "all", "enable.idempotence": True}
        producer = Producer(with_logger(conf))
        attempt = uuid.uuid4().hex.encode()
        kafka_part = zlib.crc32(f"{batch_ms}-{part}".encode()) % self.partitions
        base = [(H_BATCH, str(batch_ms).encode()), (H_PART, str(part).encode()),
                (H_ATTEMPT, attempt)]
        errors: list[Any] = []

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(err)

        count = 0
        for item in items:
            value = _to_bytes(self.value(item) if self.value else item)
            key = (_to_bytes(self.key(item)) if self.key
                   else f"{batch_ms}-{part}-{count}".encode())
            while True:
                try:
                    producer.produce(self.topic, value, key, partition=kafka_part,
                                     headers=[*base, (H_SEQ, str(count).encode())],
                                     on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.05)
            count += 1
        # Step 2: the marker only after every record is acknowledged.
        if producer.flush(self.timeout_s) or errors:
            raise KafkaException(f"KafkaSink: records of batch {batch_ms} partition {part} "
                                 f"not acknowledged: {errors[:3]}")
        producer.produce(self.topic, b"", f"{batch_ms}-{part}-commit".encode(),
                         partition=kafka_part,
                         headers=[*base, (H_COMMIT, str(count).encode())],
                         on_delivery=on_delivery)
        if producer.flush(self.timeout_s) or errors:
            raise KafkaException(f"KafkaSink: commit marker of batch {batch_ms} partition "
                                 f"{part} not acknowledged: {errors[:3]}")
        return count


@dataclass(frozen=True)
class SkippedAttempt:
    """An attempt :func:`read_exactly_once` read a commit marker of and did not use."""

    batch_ms: int
    part: int
    attempt: str
    records: int  # distinct sequence numbers kept (none for a re-run: not buffered)
    count: int  # records the marker says the attempt wrote
    rerun: bool  # the partition was already read from an earlier attempt


def _headers(raw: Any) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for k, v in raw or []:
        out[str(k)] = v.encode() if isinstance(v, str) else bytes(v or b"")
    return out


def read_exactly_once(bootstrap_servers: str, topic: str, timeout_s: float = 30.0,
                      max_pending_attempts: int = 100_000,
                      kafka_conf: Mapping[str, str] | None = None,
                      on_skipped: Callable[[SkippedAttempt], None] | None = None,
                      ) -> Iterator[tuple[int, bytes | None, bytes | None]]:
    """Step 3: ``(batch_ms, key, value)`` of every committed attempt, once per
    ``(batch, part)``, reading the topic from the start to its current end.
    ``kafka_conf``: librdkafka settings (SASL, TLS, ...); default: the running
    SparkContext's ``spark.walstream.kafka.*``. ``on_skipped`` is told of each
    attempt whose marker was read and that was not used: a re-run of a partition
    already read, or an attempt lacking records its marker counts."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    settings = dict(kafka_conf) if kafka_conf is not None else app_kafka_settings()
    consumer = Consumer(with_logger({"bootstrap.servers": bootstrap_servers, **settings,
                         "group.id": f"walstream-sink-reader-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "auto.offset.reset": "earliest"}))
    try:
        md = consumer.list_topics(topic, timeout=timeout_s)
        parts = sorted(md.topics[topic].partitions) if topic in md.topics else []
        if not parts:
            return
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        at_end: set[int] = set()
        # Per attempt, its records by sequence number: a duplicate overwrites itself.
        pending: dict[tuple[bytes, bytes, bytes], dict[int, tuple[bytes | None,
                                                                  bytes | None]]] = {}
        done: set[tuple[bytes, bytes]] = set()
        while len(at_end) < len(parts):
            msg = consumer.poll(timeout_s)
            if msg is None:
                raise TimeoutError(f"read_exactly_once: {topic} gave nothing for {timeout_s}s")
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    at_end.add(int(msg.partition() or 0))
                    continue
                raise RuntimeError(f"read_exactly_once: {err}")
            at_end.discard(int(msg.partition() or 0))
            h = _headers(msg.headers())
            if H_BATCH not in h:
                continue  # not written by KafkaSink
            batch, part, attempt = h[H_BATCH], h[H_PART], h[H_ATTEMPT]
            ident = (batch, part, attempt)
            if H_COMMIT in h:
                records = pending.pop(ident, {})
                count = int(h[H_COMMIT])
                if (batch, part) in done or len(records) != count or (
                        count and max(records) != count - 1):
                    # A re-run of a committed partition, or an incomplete attempt.
                    if on_skipped is not None:
                        on_skipped(SkippedAttempt(int(batch), int(part), attempt.decode(),
                                                  len(records), count,
                                                  (batch, part) in done))
                    continue
                done.add((batch, part))
                for seq in range(count):
                    key, value = records[seq]
                    yield int(batch), key, value
            elif (batch, part) not in done:
                if ident not in pending and len(pending) >= max_pending_attempts:
                    raise RuntimeError(f"read_exactly_once: over {max_pending_attempts} "
                                       "uncommitted attempts buffered")
                raw_seq = h.get(H_SEQ, b"")
                if raw_seq.isdigit():  # else not KafkaSink's: it has no place in an attempt
                    pending.setdefault(ident, {})[int(raw_seq)] = (msg.key(), msg.value())
    finally:
        consumer.close()
