"""KafkaSink: exactly-once Kafka output for ``foreachRDD``, by attempt and commit marker.

A batch re-run after a driver crash (its output may have run before the crash)
writes its records again; a plain producer would double them. Transactions
would fence that, but the embedded Tansu broker's ``read_committed`` still
shows aborted records, so the protocol is one any broker supports:

0. Every sink writes as one *writer* (driver/sink/output_writer.py): the name given as
   ``writer=``, else its output operation's derived identity (app id and output
   index, or a ``foreachBatch`` query's id), stable across restarts from one
   checkpoint and distinct between applications, queries and output operations.
   Everything below happens per writer, so any number of writers share a topic:
   one writer's batches are never taken for re-runs of another's.
1. ``KafkaSink(...)`` is a ``foreachRDD`` function ``f(time, rdd)``. Each RDD
   partition is written by its Spark task as one *attempt*: a fresh attempt id,
   then the records, each with headers ``walstream.writer``, ``walstream.batch``
   (batch time ms), ``walstream.part`` (partition index), ``walstream.attempt``
   and ``walstream.seq``; all to one Kafka partition chosen by
   ``(writer, batch, part)``, so an attempt's records and its marker keep their
   order.
2. After every record is acknowledged (``acks=all``, idempotent producer), the
   task writes a *commit marker* (header ``walstream.commit`` = record count)
   and waits for its acknowledgement. A task killed before that leaves an
   attempt with no marker, which readers ignore.
3. :func:`read_exactly_once` yields, for each ``(writer, batch, part)``, the
   records of the first attempt whose marker it reads with every sequence number
   below the marker's count, and skips every other attempt of that slot, so
   re-runs replace rather than add. A record stored twice (a producer retry the
   broker did not deduplicate) has its attempt's sequence number again and is
   read once, so it neither doubles the output nor makes its attempt look torn.
   Records are keyed ``<writer>/<batch>-<part>-<seq>`` unless a key function is
   given, so a compacted topic converges to one copy for plain consumers too.
   Records it cannot parse are skipped and reported, never raised on; its memory
   is bounded (driver/sink/sink_reader.py).

Fencing (a hot standby taking over, ``docs/decisions/ha-lease-and-fencing.md``):

4. Every record and marker also carries the writing driver's epoch, header
   ``walstream.epoch`` (0 without HA). The epoch is the driver's, set with
   :func:`set_sink_epoch` while it leads; ``KafkaSink.__call__`` reads it on the
   driver and hands it to the task, so a sink pickled into a checkpoint never
   carries one.
5. A new leader of epoch ``e`` writes a *fence* record (headers
   ``walstream.fence`` = ``e`` and ``walstream.writer``, no batch headers) to
   every partition of each sink topic, for each writer of its graph
   (:func:`fence_sink_topic`, :func:`fence_sinks`, :meth:`KafkaSink.fence`) before
   it runs any batch. The topic must exist: a fence never creates one.
6. :func:`read_exactly_once` tracks, per Kafka partition and writer, the highest
   fence epoch read so far. An attempt of epoch ``e`` whose first record read (its
   marker, if none of its records was read) comes after a fence of its writer of
   an epoch above ``e`` is void: its records are not buffered and its marker is
   reported as ``fenced``. An attempt that started before the fence stays valid
   even when its marker comes after it: it was written after its batch's
   allocation, so that allocation precedes the new leader's cut of the driver WAL,
   which the new leader replays; a re-run of that batch has the same blocks, and
   the first committed attempt remains the right one. Records without the epoch
   header (older writers) count as epoch 0, without the writer header as the
   writer ``""``.

The sink, its fence and the reader take the application's Kafka settings
(``spark.walstream.kafka.*``: SASL, TLS, ...) from the running SparkContext's
conf, under a sink's own ``producer_config``; the sink never keeps them, since it
goes into checkpoints with the graph. For the same reason ``producer_config``
refuses secrets (:func:`walstream.kafka_settings.is_secret`), and a sink pickles
without any that were put there later.
"""

from __future__ import annotations

import functools
import json
import threading
import time as _time
import uuid
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from walstream.driver.sink.errors import (
    SinkError,
    SinkFenceError,
    SinkReadLimitError,
    SinkTopicMissingError,
    SinkWriterError,
)
from walstream.driver.sink.output_writer import check_writer, current_writer, output_writer
from walstream.driver.sink.sink_protocol import (
    H_ATTEMPT,
    H_BATCH,
    H_COMMIT,
    H_EPOCH,
    H_FENCE,
    H_PART,
    H_SEQ,
    H_WRITER,
    app_kafka_settings,
)
from walstream.driver.sink.sink_reader import (
    Skipped,
    SkippedAttempt,
    SkippedRecord,
    read_exactly_once,
)
from walstream.errors import ConfigError
from walstream.kafka_logging import with_logger
from walstream.kafka_settings import is_secret

__all__ = ["H_ATTEMPT", "H_BATCH", "H_COMMIT", "H_EPOCH", "H_FENCE", "H_PART", "H_SEQ",
           "H_WRITER", "KafkaSink", "SinkError", "SinkFenceError", "SinkReadLimitError",
           "SinkTopicMissingError", "SinkWriterError", "Skipped", "SkippedAttempt", "SkippedRecord",
           "app_kafka_settings", "fence_sink_topic", "fence_sinks", "graph_sink_writers",
           "kafka_sinks_of", "read_exactly_once", "set_sink_epoch", "sink_epoch"]


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
    ``<writer>/<batch>-<part>-<seq>``). ``partitions`` is the topic's partition
    count (records of one attempt go to one partition; default 1). ``writer`` names
    this sink's writer identity (default: derived from the output operation that
    calls it, driver/sink/output_writer.py); give it when the sink is called outside a
    StreamingContext output operation or a ``foreachBatch`` query, or to keep one
    identity across a change of checkpoint directory.

    ``producer_config`` is pickled into checkpoints with the graph, so it takes no
    secret (``sasl.password``, ``ssl.key.pem``, ...: :class:`ConfigError`); secrets
    come from the application's ``spark.walstream.kafka.*`` settings at run time.
    """

    def __init__(self, bootstrap_servers: str, topic: str,
                 value: Callable[[Any], Any] | None = None,
                 key: Callable[[Any], Any] | None = None,
                 partitions: int = 1, timeout_s: float = 60.0,
                 producer_config: dict[str, Any] | None = None,
                 writer: str | None = None) -> None:
        if partitions < 1:
            raise ConfigError("partitions must be >= 1")
        if not 0 < timeout_s <= 3600:
            raise ConfigError("timeout_s must be in (0, 3600]")
        secrets = sorted(k for k in (producer_config or {}) if is_secret(k))
        if secrets:
            raise ConfigError(
                f"KafkaSink: producer_config holds secrets ({', '.join(secrets)}), which "
                "would be written into every checkpoint with the graph; set them as "
                "spark.walstream.kafka.<key> in the application's Spark conf instead")
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.value = value
        self.key = key
        self.partitions = partitions
        self.timeout_s = timeout_s
        self.producer_config = dict(producer_config or {})
        self.writer = None if writer is None else check_writer(writer)

    def __getstate__(self) -> dict[str, Any]:
        # What is pickled (into the graph, its checkpoints and the tasks) never holds
        # a secret, even one put into producer_config after construction.
        state = dict(self.__dict__)
        state["producer_config"] = {k: v for k, v in self.producer_config.items()
                                    if not is_secret(k)}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state.setdefault("writer", None)  # pickled before writer identities
        self.__dict__.update(state)

    def writer_for(self, sc: Any = None) -> str:
        """The writer identity this sink writes as now: its own ``writer``, else the
        running output operation's (driver/sink/output_writer.py); else
        :class:`SinkWriterError`."""
        writer = self.writer or current_writer(sc)
        if writer is None:
            raise SinkWriterError(
                f"KafkaSink({self.topic!r}) has no writer identity here: it runs outside "
                "a StreamingContext output operation and a foreachBatch query; name one "
                "with KafkaSink(..., writer=...)")
        return writer

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
        # writer and the epoch the driver led in when it started the batch's output.
        writer = functools.partial(self.write_partition,
                                   kafka_settings=app_kafka_settings(rdd.context),
                                   epoch=sink_epoch(), writer=self.writer_for(rdd.context))
        rdd.mapPartitionsWithIndex(
            lambda part, items: [writer(batch_ms, part, items)]).collect()

    def fence(self, epoch: int, kafka_conf: Mapping[str, Any] | None = None,
              timeout_s: float = 10.0, writer: str | None = None) -> int:
        """Fence this sink's topic for ``epoch`` and ``writer`` (default: this sink's
        own ``writer``; see :func:`fence_sink_topic`), with the application's Kafka
        settings (default: the running SparkContext's) under this sink's
        ``producer_config``. Returns the number of partitions fenced."""
        who = writer or self.writer_for()
        return fence_sinks([(self, who)], epoch, kafka_conf=kafka_conf,
                           timeout_s=timeout_s)[self.topic]

    def write_partition(self, batch_ms: int, part: int, items: Any,
                        kafka_settings: Mapping[str, str] | None = None,
                        epoch: int = 0, writer: str | None = None) -> int:
        """Steps 1-2 for one partition (runs in the Spark task); returns its count.
        Every record and the marker carry ``writer`` (default: this sink's own) and
        ``epoch``, the writing driver's."""
        from confluent_kafka import KafkaException, Producer

        who = check_writer(writer or self.writer_for())
        conf = {"bootstrap.servers": self.bootstrap_servers, "linger.ms": 5,
                "delivery.timeout.ms": int(self.timeout_s * 1000), **(kafka_settings or {}),
                **self.producer_config, "acks": "all", "enable.idempotence": True}
        producer = Producer(with_logger(conf))
        attempt = uuid.uuid4().hex.encode()
        slot = f"{who}/{batch_ms}-{part}"
        kafka_part = zlib.crc32(slot.encode()) % self.partitions
        base = [(H_WRITER, who.encode()), (H_BATCH, str(batch_ms).encode()),
                (H_PART, str(part).encode()), (H_ATTEMPT, attempt),
                (H_EPOCH, str(epoch).encode())]
        errors: list[Any] = []

        def on_delivery(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(err)

        count = 0
        for item in items:
            value = _to_bytes(self.value(item) if self.value else item)
            key = (_to_bytes(self.key(item)) if self.key
                   else f"{slot}-{count}".encode())
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
        producer.produce(self.topic, b"", f"{slot}-commit".encode(),
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


def _fence_topics(conf: Mapping[str, Any], topics: Mapping[str, Sequence[str]],
                  epoch: int, timeout_s: float) -> dict[str, int]:
    """Write one fence record of ``epoch`` for each writer of ``topics`` (topic ->
    writers) to every partition of its topic through one producer, and return once
    the broker acknowledged all of them (``acks=all``); partitions fenced per topic.
    Bounded by ``timeout_s`` overall."""
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
            for writer in topics[topic]:
                headers: list[tuple[str, str | bytes | None]] = [
                    (H_FENCE, str(epoch).encode()), (H_WRITER, writer.encode())]
                for part in sorted(meta.partitions):
                    try:
                        producer.produce(topic, b"",
                                         f"walstream-fence-{writer}-{epoch}".encode(),
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


def fence_sink_topic(bootstrap_servers: str, topic: str, epoch: int, writer: str,
                     kafka_conf: Mapping[str, Any] | None = None,
                     timeout_s: float = 10.0) -> int:
    """Write a fence record for ``epoch`` and ``writer`` (headers ``walstream.fence``
    and ``walstream.writer``, no batch headers) to every partition of ``topic`` and
    wait until the broker acknowledged each one; return the number of partitions
    fenced.

    Once this returns, :func:`read_exactly_once` ignores every attempt of
    ``writer`` of an epoch below ``epoch`` that starts later in any partition of the
    topic, so a paused older leader that wakes can no longer add output; other
    writers' attempts are not touched. ``kafka_conf``: librdkafka
    settings (default: the running SparkContext's ``spark.walstream.kafka.*``).
    Raises :class:`SinkTopicMissingError` for a topic that does not exist (it is
    never created) and :class:`SinkFenceError` when the metadata or any
    acknowledgement does not arrive within ``timeout_s`` (broker down, ...).
    Fencing is idempotent: a retry after a failure only adds fence records."""
    _check_fence_args(epoch, timeout_s)
    settings = dict(kafka_conf) if kafka_conf is not None else app_kafka_settings()
    conf = {**settings, "bootstrap.servers": bootstrap_servers}
    return _fence_topics(conf, {topic: [check_writer(writer)]}, epoch, timeout_s)[topic]


def fence_sinks(sinks: Iterable[tuple[KafkaSink, str]], epoch: int,
                kafka_conf: Mapping[str, Any] | None = None,
                timeout_s: float = 10.0) -> dict[str, int]:
    """Fence the topics of all ``sinks``, each ``(sink, writer)``, for ``epoch`` and
    that writer (:func:`fence_sink_topic`, :func:`graph_sink_writers`), with one
    producer per bootstrap and ``producer_config``, so a takeover pays one
    producer start per cluster rather than one per sink. ``kafka_conf`` is the
    application's Kafka settings (default: the running SparkContext's), under each
    sink's own ``producer_config``. Returns partitions fenced per topic; raises as
    :func:`fence_sink_topic` does, on the first topic that fails."""
    _check_fence_args(epoch, timeout_s)
    settings = dict(kafka_conf) if kafka_conf is not None else app_kafka_settings()
    groups: dict[tuple[str, str], tuple[dict[str, Any], dict[str, list[str]]]] = {}
    for pair in sinks:
        sink, writer = pair if isinstance(pair, tuple) and len(pair) == 2 else (pair, "")
        if not isinstance(sink, KafkaSink):
            raise ConfigError(f"fence_sinks takes (KafkaSink, writer) pairs, not {pair!r}")
        check_writer(writer)
        conf = {**settings, **sink.producer_config,
                "bootstrap.servers": sink.bootstrap_servers}
        ident = (sink.bootstrap_servers,
                 json.dumps(sink.producer_config, sort_keys=True, default=repr))
        _, topics = groups.setdefault(ident, (conf, {}))
        writers = topics.setdefault(sink.topic, [])
        if writer not in writers:
            writers.append(writer)
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


def graph_sink_writers(output_funcs: Sequence[Any], app_id: str) -> list[tuple[KafkaSink, str]]:
    """Every KafkaSink of a graph's output functions (in output order, as
    :func:`kafka_sinks_of` finds them) with the writer identity it writes as: its
    own ``writer``, else that output operation's (driver/sink/output_writer.py). A new
    leader fences exactly these."""
    return [(sink, sink.writer or output_writer(app_id, index))
            for index, func in enumerate(output_funcs) for sink in kafka_sinks_of(func)]
