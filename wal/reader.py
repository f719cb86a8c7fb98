"""Reading WAL records back from Kafka by handle or whole segments.

Separate from the writer so that PySpark tasks can read blocks by handle with a
light object (no producer, no admin client). Reading to the end of a segment
uses the EOF event of a Fetch (``enable.partition.eof``), never ListOffsets'
high watermark, which the embedded broker gets wrong.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from walstream.kafka_logging import with_logger
from walstream.wal.errors import CorruptRecordError, RecordNotFoundError, WalReadError
from walstream.wal.framing import DEFAULT_MAX_RECORD_BYTES, Reassembler, decode_frame
from walstream.wal.handle import RecordHandle

log = logging.getLogger(__name__)

FETCH_WAIT_MS = 500
# Reads by handle: after delivering a record librdkafka at once sends the next Fetch
# (at the end of the log), which the broker holds for fetch.wait.max.ms; the next
# read's Fetch queues behind it, so with the default wait every read would pay it.
# A handle names a record that exists, so a short wait is safe: an empty answer (or a
# false end of partition from the s3:// engine) is just polled again
# (docs/decisions/wal-read-fetch-waits.md).
READ_FETCH_WAIT_MS = 10
# How long an end of partition must persist before read() calls a handle beyond the end.
EOF_CONFIRM_S = 1.0
# Tansu's s3:// engine answers such short Fetches with nothing for as long as the
# segment is being written to, so a read could wait until its timeout: a read that
# gets nothing within this bound goes on with fetch.wait.max.ms = FETCH_WAIT_MS, and
# this process keeps doing so for that cluster.
FAST_READ_GIVE_UP_S = 1.0
_SLOW_READ_CLUSTERS: set[str] = set()

_OUT_OF_RANGE_CODES = {KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET}

CorruptHandler = Callable[[CorruptRecordError], None]

_NOT_FOUND_CODES = {
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError.OFFSET_OUT_OF_RANGE,
    KafkaError._AUTO_OFFSET_RESET,
}


def consumer_config(bootstrap_servers: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """librdkafka settings for assign()-only WAL readers (no group join, no commits)."""
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers,
        "group.id": "walstream-wal-reader",  # required by the client; never joined
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",  # a cleaned offset must fail, not jump
        # librdkafka's default. Not shorter: Tansu's s3:// engine answers a short
        # Fetch wait with no records while the partition is being written to, and
        # the reader then never reaches the end; under load (moto is Python) a
        # fetch outlasts a short wait (docs/decisions/wal-read-fetch-waits.md).
        "fetch.wait.max.ms": FETCH_WAIT_MS,
        "socket.connection.setup.timeout.ms": 10_000,
        "topic.metadata.refresh.interval.ms": 5_000,
    }
    conf.update(extra or {})
    return conf


def _topic_missing(consumer: Consumer, topic: str) -> bool:
    """True when the broker answers and does not list ``topic``.

    Lists all topics rather than asking for one, since a metadata request for
    a single unknown topic can auto-create it on some brokers.
    """
    try:
        md = consumer.list_topics(timeout=5)
    except Exception:
        return False  # no answer: let the caller's timeout decide
    return topic not in md.topics


def _at_high_watermark(consumer: Consumer, topic: str, partition: int, offset: int) -> bool:
    """True when ``offset`` is the last record the latest Fetch response reported.

    The Fetch response's high watermark is right on every broker tried (unlike
    ListOffsets' on Tansu), and it is as good an end as the EOF event, which is
    a snapshot too; but the EOF only comes from one more Fetch, which the broker
    holds for fetch.wait.max.ms, once per segment of a replay.
    """
    try:
        _low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                    cached=True)
    except Exception:
        return False  # no cached answer: wait for the EOF
    return high is not None and high > 0 and offset + 1 >= high


class _Releasable(Protocol):
    def release(self, topics: set[str]) -> None: ...


# Every WalReader and log follower of this process, for release_topics.
_READERS: weakref.WeakSet[_Releasable] = weakref.WeakSet()
_READERS_LOCK = threading.Lock()


def register_releasable(holder: _Releasable) -> None:
    """Have :func:`release_topics` call ``holder.release(topics)`` before a deletion."""
    with _READERS_LOCK:
        _READERS.add(holder)


def unregister_releasable(holder: _Releasable) -> None:
    with _READERS_LOCK:
        _READERS.discard(holder)


def release_topics(topics: Iterable[str]) -> None:
    """Close this process's reader and follower consumers that fetched any of ``topics``.

    Call it before deleting the topics.

    librdkafka (2.16) crashes the process (SIGSEGV in rd_kafka_metadata_cache_find)
    when a Fetch response for a deleted topic comes back without a topic id but
    with a current-leader tag, as Tansu answers. A consumer gets such an answer
    when a Fetch for the topic is in flight as it is deleted (librdkafka sends the
    next Fetch right after delivering a record, and unassign() does not cancel
    it), and whenever it is assigned the topic again afterwards, since it keeps
    the topic's old metadata. Closing the consumer drops both; a consumer created
    after the deletion finds no such topic and sends no Fetch for it. Each
    reader's lock is taken, so a read in progress finishes first.
    """
    doomed = set(topics)
    with _READERS_LOCK:
        readers = list(_READERS)
    for reader in readers:
        reader.release(doomed)


def default_corrupt_handler(err: CorruptRecordError) -> None:
    log.warning("WAL: skipping a corrupt or foreign record: %s", err)


class WalReader:
    """Reads WAL frames back; one Kafka consumer, serialised by a lock.

    A frame declaring a record above ``max_record_bytes`` (give the writer's
    ``KafkaWalConfig.max_record_bytes`` when it was raised) is corrupt, so no read
    holds more than that many bytes of one record.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        timeout_s: float = 30.0,
        extra_config: dict[str, Any] | None = None,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
    ) -> None:
        self._max_record_bytes = max_record_bytes
        self._conf = consumer_config(bootstrap_servers, extra_config)
        self._read_conf = consumer_config(
            bootstrap_servers, {"fetch.wait.max.ms": READ_FETCH_WAIT_MS, **(extra_config or {})})
        self._timeout_s = timeout_s
        self._cluster = bootstrap_servers
        self._consumer: Consumer | None = None  # short fetch wait
        self._slow_consumer: Consumer | None = None  # normal fetch wait
        self._fetched: set[str] = set()  # topics assigned since the consumers were created
        # (slow, topic, partition, offset): the consumer left assigned by a read whose
        # next record the caller reads next (read_many); None: nothing left assigned.
        self._left_at: tuple[bool, str, int, int] | None = None
        self._lock = threading.Lock()
        with _READERS_LOCK:
            _READERS.add(self)

    def _get_consumer(self, slow: bool) -> Consumer:
        if slow and self._slow_consumer is None:
            self._slow_consumer = Consumer(with_logger(self._conf))
        if not slow and self._consumer is None:
            self._consumer = Consumer(with_logger(self._read_conf))
        consumer = self._slow_consumer if slow else self._consumer
        assert consumer is not None
        return consumer

    def close(self) -> None:
        with self._lock:
            self._close_consumers()

    def release(self, topics: set[str]) -> None:
        """Close the consumers if they fetched any of ``topics`` (see :func:`release_topics`).

        The next read creates new ones, so this costs a consumer start after a
        clean, not one per read.
        """
        with self._lock:  # no read of this reader is running while its consumers close
            if not self._fetched.isdisjoint(topics):
                self._close_consumers()

    def _close_consumers(self) -> None:
        for consumer in (self._consumer, self._slow_consumer):
            if consumer is not None:
                consumer.close()
        self._consumer = self._slow_consumer = None
        self._fetched.clear()
        self._left_at = None

    def read_many(self, handles: Iterable[RecordHandle]) -> Iterator[tuple[bytes, int]]:
        """:meth:`read` of each handle, in order.

        A handle whose record directly follows the previous one in the same
        partition (a receiver's consecutive blocks) is read on from where the
        previous read stopped, with the records the consumer already fetched,
        instead of a new ``assign``, which would wait behind the Fetch in flight.
        A handle in another topic than the previous one is read by new consumers:
        librdkafka starts fetching a topic new to a consumer only after about a
        second, a fresh consumer at once.
        """
        todo = list(handles)
        for i, handle in enumerate(todo):
            nxt = todo[i + 1] if i + 1 < len(todo) else None
            follows = nxt is not None and (nxt.topic, nxt.partition, nxt.offset) == (
                handle.topic, handle.partition, handle.offset + handle.chunks)
            with self._lock:
                if i and todo[i - 1].topic != handle.topic:
                    self._close_consumers()
            yield self.read(handle, keep=follows)

    def read(self, handle: RecordHandle, keep: bool = False) -> tuple[bytes, int]:
        """Return ``(record bytes, record time ms)`` stored at ``handle``.

        First with a short Fetch wait (see READ_FETCH_WAIT_MS); when that brings
        nothing within FAST_READ_GIVE_UP_S, with the normal wait, which every
        broker answers truthfully. Raises WalReadError after ``timeout_s`` in all.
        ``keep``: leave the consumer fetching after the record (the next read
        starts right after it: :meth:`read_many`).
        """
        where = f"{handle.topic}[{handle.partition}]@{handle.offset}"
        deadline = time.monotonic() + self._timeout_s
        with self._lock:
            if self._cluster not in _SLOW_READ_CLUSTERS:
                got = self._read(handle, where, slow=False,
                                 give_up=min(deadline, time.monotonic() + FAST_READ_GIVE_UP_S),
                                 keep=keep)
                if got is not None:
                    return got
                got = self._read(handle, where, slow=True, give_up=deadline, keep=keep)
                if got is not None:
                    # The short wait hid a record that exists: not for this cluster.
                    log.info("WAL: %s: found only with a %d ms fetch wait; reading with it "
                             "from now on", where, FETCH_WAIT_MS)
                    _SLOW_READ_CLUSTERS.add(self._cluster)
            else:
                got = self._read(handle, where, slow=True, give_up=deadline, keep=keep)
            if got is None:
                raise WalReadError(f"{where}: no answer within {self._timeout_s}s (broker down?)")
            return got

    def _read(self, handle: RecordHandle, where: str, slow: bool,
              give_up: float, keep: bool = False) -> tuple[bytes, int] | None:
        """One attempt; None when ``give_up`` passed without the whole record."""
        consumer = self._get_consumer(slow)
        self._fetched.add(handle.topic)
        if self._left_at != (slow, handle.topic, handle.partition, handle.offset):
            # Anything else left assigned is replaced; its fetched records dropped.
            consumer.assign([TopicPartition(handle.topic, handle.partition, handle.offset)])
        self._left_at = None
        try:
            asm = Reassembler()
            expected = handle.offset
            next_check = time.monotonic() + 1.0
            eof_at: float | None = None
            while True:
                if time.monotonic() > give_up:
                    return None
                if slow and eof_at is not None and time.monotonic() - eof_at > EOF_CONFIRM_S:
                    # Only a normal-wait Fetch's end is believed (see FAST_READ_GIVE_UP_S).
                    raise RecordNotFoundError(f"{where}: beyond the end of the log")
                msg = consumer.poll(0.2)
                if msg is None:
                    if time.monotonic() > next_check:
                        # An assign() to a deleted topic waits silently: ask.
                        next_check = time.monotonic() + 1.0
                        if _topic_missing(consumer, handle.topic):
                            raise RecordNotFoundError(f"{where}: topic was cleaned")
                    continue
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        # Beyond the end only if it stays so (see READ_FETCH_WAIT_MS).
                        eof_at = eof_at if eof_at is not None else time.monotonic()
                        continue
                    if err.code() in _NOT_FOUND_CODES:
                        raise RecordNotFoundError(f"{where}: not in the log ({err.str()})")
                    if err.retriable() or err.code() == KafkaError._TRANSPORT:
                        continue
                    raise WalReadError(f"{where}: {err.str()}")
                if msg.offset() != expected:
                    raise CorruptRecordError(
                        f"{where}: expected offset {expected}, broker gave {msg.offset()}"
                    )
                eof_at = None
                at = f"{handle.topic}@{msg.offset()}"
                frame = decode_frame(msg.value(), at, self._max_record_bytes)
                if frame.chunk_index == 0 and expected != handle.offset:
                    raise CorruptRecordError(f"{where}: a new record starts at {at} "
                                             f"before the handle's {handle.chunks} chunks")
                record = asm.feed(frame, at)
                expected += 1
                if record is not None:
                    if expected - handle.offset != handle.chunks:
                        raise CorruptRecordError(
                            f"{where}: handle says {handle.chunks} chunks, record has "
                            f"{expected - handle.offset}"
                        )
                    if keep:
                        self._left_at = (slow, handle.topic, handle.partition, expected)
                    return record, int(msg.timestamp()[1])
        finally:
            if self._left_at is None:
                consumer.unassign()

    def segment_extents(self, topics: list[str], partition: int = 0,
                        timeout_s: float | None = None) -> dict[str, tuple[int, int]]:
        """``{topic: (start, end)}``: the offset :meth:`read_segment` starts reading
        each topic at and the partition's end offset now, so ``end - start`` Kafka
        records lie ahead of it.

        One consumer fetches every topic from offset 0, the way :meth:`read_segment`
        starts; a partition's end is the high watermark its Fetch response carried
        (never ListOffsets', wrong on the embedded broker), taken at its first
        record, whose offset is the start, or at its end-of-partition event (an
        empty segment). A partition is paused once known, and the consumer buffers
        little, so the probe moves about one record per topic, not the segments. A
        head trimmed by retention falls back to the low and high watermarks, as the
        read falls back to the beginning; a topic deleted meanwhile has nothing
        ahead. A topic without an answer within ``timeout_s`` (default: the
        reader's timeout) is left out: its extent is not known.
        """
        if not topics:
            return {}
        deadline = time.monotonic() + (self._timeout_s if timeout_s is None else timeout_s)
        found: dict[str, tuple[int, int]] = {}
        pending = set(topics)
        consumer = Consumer(with_logger({**self._conf, "queued.max.messages.kbytes": 1,
                                         "max.partition.fetch.bytes": 1024}))
        try:
            consumer.assign([TopicPartition(t, partition, 0) for t in pending])
            next_check = time.monotonic() + 1.0
            while pending and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is None:
                    if time.monotonic() > next_check:
                        next_check = time.monotonic() + 1.0
                        for t in list(pending):
                            if _topic_missing(consumer, t):
                                found[t] = (0, 0)  # deleted by a clean: nothing ahead
                                pending.discard(t)
                    continue
                topic = str(msg.topic())
                if topic not in pending:
                    continue
                tp = TopicPartition(topic, partition)
                err = msg.error()
                if err is None:
                    start = int(msg.offset() or 0)
                    _low, high = consumer.get_watermark_offsets(tp, cached=True)
                    found[topic] = (start, max(int(high), start + 1))
                elif err.code() == KafkaError._PARTITION_EOF:
                    end = int(msg.offset() or 0)
                    found[topic] = (end, end)
                elif err.code() in _OUT_OF_RANGE_CODES:
                    low, high = consumer.get_watermark_offsets(
                        tp, timeout=max(0.1, deadline - time.monotonic()))
                    found[topic] = (int(low), int(high))
                elif err.code() in _NOT_FOUND_CODES:
                    found[topic] = (0, 0)
                else:
                    continue  # retriable: the next poll or the deadline decides
                pending.discard(topic)
                consumer.pause([tp])
        finally:
            consumer.close()
        return found

    def read_segment(
        self,
        topic: str,
        partition: int = 0,
        min_time_ms: int = -1,
        on_corrupt: CorruptHandler | None = None,
        strict: bool = False,
        on_position: Callable[[int], None] | None = None,
    ) -> Iterator[tuple[bytes, int, int, int]]:
        """Yield ``(record, time_ms, first_offset, chunks)`` for every whole record of a topic.

        Records older than ``min_time_ms`` are skipped. A corrupt or foreign
        record is passed to ``on_corrupt`` and skipped (raised when ``strict``). A
        record whose chunks stop early belongs to a write that never returned: at
        the end it is skipped (logged), and when a new record follows it (a
        writer died between chunks and another wrote on) it is passed to
        ``on_corrupt`` as a :class:`~walstream.wal.errors.TornRecordError`, even when
        ``strict``, and the record that follows is read whole. A topic deleted
        meanwhile simply ends.

        ``on_position`` is told the offset after every Kafka record the read has
        passed (a chunk, a record yielded or skipped), before that record's data is
        yielded, and the end offset at an end-of-partition event: a caller follows
        the read in offsets, exact whatever records hold.
        """
        report = on_corrupt or default_corrupt_handler
        consumer = Consumer(with_logger(self._conf))
        try:
            # From offset 0, not OFFSET_BEGINNING: segment topics are never trimmed
            # from the front (a clean deletes them whole), and resolving "beginning"
            # costs a ListOffsets wait of about fetch.wait.max.ms per segment
            # (docs/decisions/wal-read-fetch-waits.md). A log whose head was trimmed
            # anyway (retention on a real cluster) falls back to the beginning below.
            consumer.assign([TopicPartition(topic, partition, 0)])
            from_zero = True
            asm = Reassembler(on_torn=report)
            first_offset = -1
            idle_since = time.monotonic()
            next_check = idle_since + 1.0
            while True:
                msg = consumer.poll(0.2)
                if msg is None:
                    idle = time.monotonic() - idle_since
                    if time.monotonic() > next_check:
                        next_check = time.monotonic() + 1.0
                        if _topic_missing(consumer, topic):
                            break  # deleted by a clean: nothing more to yield
                    if idle > self._timeout_s:
                        raise WalReadError(
                            f"{topic}: no answer within {self._timeout_s}s (broker down?)"
                        )
                    continue
                idle_since = time.monotonic()
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        if on_position is not None:
                            on_position(int(msg.offset() or 0))
                        break
                    if from_zero and err.code() in _OUT_OF_RANGE_CODES:
                        from_zero = False
                        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
                        continue
                    if err.code() in _NOT_FOUND_CODES:
                        break  # cleaned while we read: nothing more to yield
                    if err.retriable() or err.code() == KafkaError._TRANSPORT:
                        continue
                    raise WalReadError(f"{topic}: {err.str()}")
                from_zero = False
                offset = int(msg.offset() or 0)
                if on_position is not None:
                    on_position(offset + 1)
                where = f"{topic}@{offset}"
                try:
                    frame = decode_frame(msg.value(), where, self._max_record_bytes)
                    if frame.chunk_index == 0:  # feed starts a record with it or raises
                        first_offset = offset
                    record = asm.feed(frame, where)
                except CorruptRecordError as exc:
                    if strict:
                        raise
                    report(exc)
                    continue
                if record is None:
                    continue
                ts = int(msg.timestamp()[1])
                if ts >= min_time_ms:
                    yield record, ts, first_offset, offset - first_offset + 1
                if _at_high_watermark(consumer, topic, partition, offset):
                    break
            if asm.pending:
                log.info("WAL: %s ends with an incomplete record from %s "
                         "(its write never returned); skipped", topic, asm.reset())
        finally:
            consumer.close()
