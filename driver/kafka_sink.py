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

Memory of the reader is bounded by the attempts it has seen start and not yet
commit (``max_pending_attempts``), plus one fence epoch per Kafka partition.

Fencing (a hot standby taking over, ``docs/decisions/ha-lease-and-fencing.md``):

4. Every record and marker also carries the writing driver's epoch, header
   ``walstream.epoch`` (0 without HA). The epoch is the driver's, set with
   :func:`set_sink_epoch` while it leads; ``KafkaSink.__call__`` reads it on the
   driver and hands it to the task, so a sink pickled into a checkpoint never
   carries one.
5. A new leader of epoch ``e`` writes a *fence* record (header
   ``walstream.fence`` = ``e``, no batch headers) to every partition of each
   sink topic (:func:`fence_sink_topic`, :func:`fence_sinks`,
   :meth:`KafkaSink.fence`) before it runs any batch. The topic must exist: a
   fence never creates one.
6. :func:`read_exactly_once` tracks, per Kafka partition, the highest fence epoch
   read so far. An attempt of epoch ``e`` whose first record read (its marker, if
   none of its records was read) comes after a fence of an epoch above ``e`` is
   void: its records are not buffered and its marker is reported as
   ``fenced``. An attempt that started before the fence stays valid even when
   its marker comes after it: it was written after its batch's allocation, so
   that allocation precedes the new leader's cut of the driver WAL, which the new
   leader replays; a re-run of that batch has the same blocks, and the first
   committed attempt remains the right one. Records without the epoch header
   (older writers) count as epoch 0.

The sink, its fence and the reader take the application's Kafka settings
(``spark.walstream.kafka.*``: SASL, TLS, ...) from the running SparkContext's
conf, under a sink's own ``producer_config``; the sink never keeps them, since it
goes into checkpoints with the graph.
"""

from __future__ import annotations

import functools
import json
import threading
import time as _time
import uuid
import weakref
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from driver.errors import DriverError
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
H_EPOCH, H_FENCE = "walstream.epoch", "walstream.fence"


class SinkError(DriverError):
    """Root of the errors :mod:`driver.kafka_sink` raises on purpose."""


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


# The epoch this driver process leads in; 0 without HA. A process has one
# SparkContext and leads at most one epoch at a time, so one value per process.
_EPOCH_LOCK = threading.Lock()
_epoch = 0


def set_sink_epoch(epoch: int) -> None:
    """Make every KafkaSink attempt started from now on in this driver process carry
    ``epoch``. The engine calls it once it leads epoch ``epoch`` (after its claim,
    before the first batch it runs); the value is read on the driver in
    ``KafkaSink.__call__`` and passed to the tasks."""
    global _epoch
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise ConfigError(f"a sink epoch is an int >= 0, not {epoch!r}")
    with _EPOCH_LOCK:
        _epoch = epoch


def sink_epoch() -> int:
    """The epoch :func:`set_sink_epoch` set in this process (0 if never set)."""
    with _EPOCH_LOCK:
        return _epoch


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

    def __call__(self, time: Any, rdd: Any) -> None:  # (datetime, RDD) or (DataFrame, int)
        """``foreachRDD``'s ``(time, rdd)``, or Structured Streaming's ``foreachBatch``
        ``(batch_df, batch_id)``: the micro-batch id then stands where the batch time
        does. A re-run micro-batch has the same id and, from a replayable source,
        the same rows in the same partitions, so :func:`read_exactly_once` keeps
        one committed attempt of each partition."""
        if isinstance(rdd, int) and not isinstance(rdd, bool):
            batch_ms, rdd = rdd, time.rdd  # foreachBatch(df, batch_id)
        else:
            batch_ms = round(time.timestamp() * 1000)
        # Read on the driver, once per batch: every task of the batch carries the
        # epoch the driver led in when it started the batch's output.
        writer = functools.partial(self.write_partition,
                                   kafka_settings=app_kafka_settings(rdd.context),
                                   epoch=sink_epoch())
        rdd.mapPartitionsWithIndex(
            lambda part, items: [writer(batch_ms, part, items)]).collect()

    def fence(self, epoch: int, kafka_conf: Mapping[str, Any] | None = None,
              timeout_s: float = 10.0) -> int:
        """Fence this sink's topic for ``epoch`` (see :func:`fence_sink_topic`), with
        the application's Kafka settings (default: the running SparkContext's) under
        this sink's ``producer_config``. Returns the number of partitions fenced."""
        return fence_sinks([self], epoch, kafka_conf=kafka_conf, timeout_s=timeout_s)[
            self.topic]

    def write_partition(self, batch_ms: int, part: int, items: Any,
                        kafka_settings: Mapping[str, str] | None = None,
                        epoch: int = 0) -> int:
        """Steps 1-2 for one partition (runs in the Spark task); returns its count.
        Every record and the marker carry ``epoch``, the writing driver's."""
        from confluent_kafka import KafkaException, Producer

        conf = {"bootstrap.servers": self.bootstrap_servers, "linger.ms": 5,
                "delivery.timeout.ms": int(self.timeout_s * 1000), **(kafka_settings or {}),
                **self.producer_config, "acks": "all", "enable.idempotence": True}
        producer = Producer(with_logger(conf))
        attempt = uuid.uuid4().hex.encode()
        kafka_part = zlib.crc32(f"{batch_ms}-{part}".encode()) % self.partitions
        base = [(H_BATCH, str(batch_ms).encode()), (H_PART, str(part).encode()),
                (H_ATTEMPT, attempt), (H_EPOCH, str(epoch).encode())]
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


def _check_fence_args(epoch: int, timeout_s: float) -> None:
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 1:
        raise ConfigError(f"a fence epoch is an int >= 1, not {epoch!r}")
    if not 0 < timeout_s <= 3600:
        raise ConfigError("timeout_s must be in (0, 3600]")


def _fence_topics(conf: Mapping[str, Any], topics: list[str], epoch: int,
                  timeout_s: float) -> dict[str, int]:
    """Write one fence record of ``epoch`` to every partition of each of ``topics``
    through one producer, and return once the broker acknowledged all of them
    (``acks=all``); partitions fenced per topic. Bounded by ``timeout_s`` overall."""
    from confluent_kafka import KafkaException, Producer

    deadline = _time.monotonic() + timeout_s

    def left() -> float:
        return max(deadline - _time.monotonic(), 0.001)

    # No auto-creation: a topic created by its metadata request would get the
    # broker's default partition count, and a fence must not invent a topic.
    producer = Producer(with_logger({
        "linger.ms": 0, **conf, "acks": "all", "allow.auto.create.topics": False,
        "delivery.timeout.ms": max(int(timeout_s * 1000), 1)}))
    failures: dict[str, list[Any]] = {}

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failures.setdefault(str(msg.topic()), []).append(err)

    fenced: dict[str, int] = {}
    try:
        for topic in topics:
            try:
                md = producer.list_topics(topic, timeout=left())
            except KafkaException as e:
                raise SinkFenceError(topic, epoch, f"no metadata within {timeout_s}s: "
                                     f"{e}") from e
            meta = md.topics.get(topic)
            err = None if meta is None else meta.error
            if meta is None or not meta.partitions or (
                    err is not None and err.code() in _missing_topic_codes()):
                raise SinkTopicMissingError(topic, epoch, "the topic does not exist")
            if err is not None:
                raise SinkFenceError(topic, epoch, f"metadata error: {err}")
            headers: list[tuple[str, str | bytes | None]] = [(H_FENCE, str(epoch).encode())]
            for part in sorted(meta.partitions):
                try:
                    producer.produce(topic, b"", f"walstream-fence-{epoch}".encode(),
                                     partition=part, headers=headers,
                                     on_delivery=on_delivery)
                except (BufferError, KafkaException) as e:
                    raise SinkFenceError(topic, epoch, f"partition {part}: {e}") from e
            fenced[topic] = len(meta.partitions)
        unacknowledged = producer.flush(left())
        if failures:
            topic, errs = next(iter(failures.items()))
            raise SinkFenceError(topic, epoch, f"fence records not written: {errs[:3]}")
        if unacknowledged:
            raise SinkFenceError(", ".join(topics), epoch,
                                 f"{unacknowledged} fence records not acknowledged "
                                 f"within {timeout_s}s")
        return fenced
    except BaseException:
        # Nothing of a failed fence may linger in the producer's queue: purge, so
        # dropping the producer does not wait on records that will never be acked.
        producer.purge()
        producer.flush(0)
        raise


def _missing_topic_codes() -> frozenset[int]:
    from confluent_kafka import KafkaError

    return frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC,
                      KafkaError._UNKNOWN_PARTITION})


def fence_sink_topic(bootstrap_servers: str, topic: str, epoch: int,
                     kafka_conf: Mapping[str, Any] | None = None,
                     timeout_s: float = 10.0) -> int:
    """Write a fence record for ``epoch`` (header ``walstream.fence``, no batch
    headers) to every partition of ``topic`` and wait until the broker acknowledged
    each one; return the number of partitions fenced.

    Once this returns, :func:`read_exactly_once` ignores every attempt of an epoch
    below ``epoch`` that starts later in any partition of the topic, so a paused
    older leader that wakes can no longer add output. ``kafka_conf``: librdkafka
    settings (default: the running SparkContext's ``spark.walstream.kafka.*``).
    Raises :class:`SinkTopicMissingError` for a topic that does not exist (it is
    never created) and :class:`SinkFenceError` when the metadata or any
    acknowledgement does not arrive within ``timeout_s`` (broker down, ...).
    Fencing is idempotent: a retry after a failure only adds fence records."""
    _check_fence_args(epoch, timeout_s)
    settings = dict(kafka_conf) if kafka_conf is not None else app_kafka_settings()
    conf = {**settings, "bootstrap.servers": bootstrap_servers}
    return _fence_topics(conf, [topic], epoch, timeout_s)[topic]


def fence_sinks(sinks: Iterable[KafkaSink], epoch: int,
                kafka_conf: Mapping[str, Any] | None = None,
                timeout_s: float = 10.0) -> dict[str, int]:
    """Fence the topics of all ``sinks`` for ``epoch`` (:func:`fence_sink_topic`),
    with one producer per bootstrap and ``producer_config``, so a takeover pays one
    producer start per cluster rather than one per sink. ``kafka_conf`` is the
    application's Kafka settings (default: the running SparkContext's), under each
    sink's own ``producer_config``. Returns partitions fenced per topic; raises as
    :func:`fence_sink_topic` does, on the first topic that fails."""
    _check_fence_args(epoch, timeout_s)
    settings = dict(kafka_conf) if kafka_conf is not None else app_kafka_settings()
    groups: dict[tuple[str, str], tuple[dict[str, Any], list[str]]] = {}
    for sink in sinks:
        if not isinstance(sink, KafkaSink):
            raise ConfigError(f"fence_sinks takes KafkaSink instances, not {sink!r}")
        conf = {**settings, **sink.producer_config,
                "bootstrap.servers": sink.bootstrap_servers}
        ident = (sink.bootstrap_servers,
                 json.dumps(sink.producer_config, sort_keys=True, default=repr))
        _, topics = groups.setdefault(ident, (conf, []))
        if sink.topic not in topics:
            topics.append(sink.topic)
    fenced: dict[str, int] = {}
    deadline = _time.monotonic() + timeout_s
    for conf, topics in groups.values():
        remaining = deadline - _time.monotonic()
        if remaining <= 0:
            raise SinkFenceError(", ".join(topics), epoch, f"no time left of {timeout_s}s")
        fenced.update(_fence_topics(conf, topics, epoch, remaining))
    return fenced


def kafka_sinks_of(*funcs: Any, depth: int = 4) -> list[KafkaSink]:
    """The KafkaSink instances reachable from ``funcs`` (output functions such as a
    ``ForEachDStream``'s) through closures, ``functools.partial`` arguments and bound
    methods, ``depth`` levels deep, each once, in the order found. A sink referenced
    only as a global of the user's function is not found; such an application
    fences its sinks itself."""
    found: list[KafkaSink] = []
    seen: set[int] = set()

    def walk(obj: Any, level: int) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, KafkaSink):
            found.append(obj)
            return
        if level >= depth:
            return
        inner: list[Any] = []
        if isinstance(obj, functools.partial):
            inner = [obj.func, *obj.args, *obj.keywords.values()]
        elif hasattr(obj, "__self__") and hasattr(obj, "__func__"):
            inner = [obj.__self__]
        elif callable(obj) and getattr(obj, "__closure__", None):
            for cell in obj.__closure__:
                try:
                    inner.append(cell.cell_contents)
                except ValueError:  # an empty cell
                    continue
        for item in inner:
            walk(item, level + 1)

    for func in funcs:
        walk(func, 0)
    return found


@dataclass(frozen=True)
class SkippedAttempt:
    """An attempt :func:`read_exactly_once` read a commit marker of and did not use."""

    batch_ms: int
    part: int
    attempt: str
    records: int  # distinct sequence numbers kept (none for a re-run: not buffered)
    count: int  # records the marker says the attempt wrote
    rerun: bool  # the partition was already read from an earlier attempt
    fenced: bool = False  # started after a fence of a newer epoch: void
    epoch: int = 0  # the writing driver's epoch (0: without HA, or an older writer)

    @property
    def reason(self) -> str:
        """Why the attempt was not used: ``fenced``, ``rerun`` or ``incomplete``."""
        if self.fenced:
            return "fenced"
        return "rerun" if self.rerun else "incomplete"


def _headers(raw: Any) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for k, v in raw or []:
        out[str(k)] = v.encode() if isinstance(v, str) else bytes(v or b"")
    return out


def _epoch_of(h: Mapping[str, bytes]) -> int:
    """A record's writer epoch; 0 when absent (older writers) or not a number."""
    raw = h.get(H_EPOCH, b"")
    return int(raw) if raw.isdigit() else 0


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
    already read, an attempt lacking records its marker counts, or an attempt
    void by a fence (step 6).

    Memory: the records of attempts started and not yet committed, plus one entry
    per started attempt whose records are not kept (void, or a re-run), at most
    ``max_pending_attempts`` attempts in all; and one fence epoch per partition."""
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
        # Started attempts whose records are not kept: void (True) or the re-run
        # of a partition already read (False).
        unkept: dict[tuple[bytes, bytes, bytes], bool] = {}
        done: set[tuple[bytes, bytes]] = set()
        fence: dict[int, int] = {}  # Kafka partition -> highest fence epoch read
        while len(at_end) < len(parts):
            msg = consumer.poll(timeout_s)
            if msg is None:
                raise TimeoutError(f"read_exactly_once: {topic} gave nothing for {timeout_s}s")
            err = msg.error()
            kafka_part = int(msg.partition() or 0)
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    at_end.add(kafka_part)
                    continue
                raise RuntimeError(f"read_exactly_once: {err}")
            at_end.discard(kafka_part)
            h = _headers(msg.headers())
            raw_fence = h.get(H_FENCE, b"")
            if raw_fence.isdigit() and H_BATCH not in h:
                fence[kafka_part] = max(fence.get(kafka_part, 0), int(raw_fence))
                continue
            if H_BATCH not in h:
                continue  # not written by KafkaSink
            batch, part, attempt = h[H_BATCH], h[H_PART], h[H_ATTEMPT]
            ident = (batch, part, attempt)
            epoch = _epoch_of(h)
            if H_COMMIT in h:
                kept = pending.pop(ident, None)
                was_void = unkept.pop(ident, None)
                # No record of the attempt read before: the marker is its first.
                void = (epoch < fence.get(kafka_part, 0) if kept is None and was_void is None
                        else bool(was_void))
                records = kept or {}
                count = int(h[H_COMMIT])
                if void or (batch, part) in done or len(records) != count or (
                        count and max(records) != count - 1):
                    # Fenced, a re-run of a committed partition, or incomplete.
                    if on_skipped is not None:
                        on_skipped(SkippedAttempt(int(batch), int(part), attempt.decode(),
                                                  len(records), count,
                                                  (batch, part) in done, void, epoch))
                    continue
                done.add((batch, part))
                for seq in range(count):
                    key, value = records[seq]
                    yield int(batch), key, value
                continue
            raw_seq = h.get(H_SEQ, b"")
            if not raw_seq.isdigit():
                continue  # not KafkaSink's: it has no place in an attempt
            started = pending.get(ident)
            if started is not None:
                if (batch, part) not in done:
                    started[int(raw_seq)] = (msg.key(), msg.value())
                continue
            if ident in unkept:
                continue
            # The attempt's first record: the fence read so far decides it for good.
            void = epoch < fence.get(kafka_part, 0)
            if len(pending) + len(unkept) >= max_pending_attempts:
                raise RuntimeError(f"read_exactly_once: over {max_pending_attempts} "
                                   "uncommitted attempts buffered")
            if void or (batch, part) in done:
                unkept[ident] = void
            else:
                pending[ident] = {int(raw_seq): (msg.key(), msg.value())}
    finally:
        consumer.close()
