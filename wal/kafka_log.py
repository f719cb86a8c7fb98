"""KafkaWriteAheadLog: Spark's WriteAheadLog contract over Kafka topics.

Write protocol (each step completes before the next starts):

1. Validate: open log, bytes, size <= ``max_record_bytes`` (else
   :class:`RecordTooLargeError`, nothing written).
2. Pick the segment for ``time_ms`` (see :mod:`walstream.wal.segments`); create its topic
   if it is new, waiting for the admin request to succeed.
3. Under the produce lock, enqueue the record's frames back to back to partition
   0 with ``acks=all`` and an idempotent producer: their offsets are consecutive
   because no other frame can slip between them and the idempotent producer
   keeps order across retries.
4. Wait, without the lock, until every frame is acknowledged or the bound runs
   out; only then return the handle. Any error raises, and the caller must
   treat the record as not stored.

Clean protocol: (1) record the threshold in a marker topic, (2) delete every
segment whose end <= threshold, (3) delete older markers. A crash between the
steps leaves either extra segments (deleted by the next clean) or two markers
(the larger wins): never a dropped record that is newer than a threshold.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from walstream import killpoints
from walstream.kafka_logging import with_logger
from walstream.wal import segments
from walstream.wal.base import ReplayProgress, WriteAheadLog
from walstream.wal.config import KafkaWalConfig, validate_log_name
from walstream.wal.delivery import DeliveryAck
from walstream.wal.errors import (
    CorruptRecordError,
    RecordNotFoundError,
    RecordTooLargeError,
    WalBackpressureError,
    WalClosedError,
    WalError,
    WalWriteError,
    WalWriteTimeoutError,
)
from walstream.wal.follow import KafkaLogFollower
from walstream.wal.framing import encode_record
from walstream.wal.handle import RecordHandle
from walstream.wal.reader import CorruptHandler, WalReader, release_topics
from walstream.wal.segments import Segment

log = logging.getLogger(__name__)

_PARTITION = 0
_FRAME_OVERHEAD = 64  # magic, version and Avro fields around a chunk
_BETWEEN_CHUNKS = "wal.between_chunks"  # kill point: see walstream.killpoints


class KafkaWriteAheadLog(WriteAheadLog):
    """A named WAL stored in Kafka segment topics (see :mod:`walstream.wal.segments`).

    Durability: :meth:`write` returns only after every frame of the record was
    acknowledged by all in-sync replicas (``acks=all``, idempotent producer).
    Creating an instance creates no topic; the first write does.

    ``delete_guard`` (optional) is called on the cleaning thread right before each
    destructive step of a :meth:`clean` (the threshold marker, the topic deletes)
    and stops that clean when it raises: a highly available driver passes its lease
    check, so data is deleted only while the lease is held at that moment, not
    merely when the clean was asked for.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        name: str,
        on_corrupt: CorruptHandler | None = None,
        delete_guard: Callable[[], None] | None = None,
        **options: Any,
    ) -> None:
        self.name = validate_log_name(name)
        self._delete_guard = delete_guard
        self.bootstrap_servers = bootstrap_servers
        self.config = options.pop("config", None) or KafkaWalConfig(**options)
        self._on_corrupt = on_corrupt
        self._closed = False
        self._produce_lock = threading.Lock()
        self._segment_lock = threading.Lock()
        self._current: Segment | None = None
        self._producer: Producer | None = None
        self._producer_broken = False
        self._poller: threading.Thread | None = None
        self._stop_polling = threading.Event()
        self._admin: AdminClient | None = None
        self._threshold_ms = -1
        self._replay: ReplayProgress | None = None
        self._followers: weakref.WeakSet[KafkaLogFollower] = weakref.WeakSet()
        self._reader = WalReader(
            bootstrap_servers, self.config.read_timeout_s,
            {**self.config.client_config, **self.config.consumer_config},
            self.config.max_record_bytes,
        )
        self._cleaner = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"wal-clean-{name}")
        self.corrupt_records = 0

    # -- clients -----------------------------------------------------------------

    def _admin_client(self) -> AdminClient:
        if self._admin is None:
            self._check_open()  # never a new client after close() released the old one
            self._admin = AdminClient(with_logger(
                {"bootstrap.servers": self.bootstrap_servers,
                 "socket.connection.setup.timeout.ms": 10_000,
                 **self.config.client_config})
            )
        return self._admin

    def _error_cb(self, err: KafkaError) -> None:
        if err.fatal():
            log.error("WAL %s: fatal producer error, recreating the producer: %s", self.name, err)
            self._producer_broken = True

    def _producer_client(self) -> Producer:
        if self._producer is not None and not self._producer_broken:
            return self._producer
        if self._producer is not None:
            self._stop_poller()
        cfg = self.config
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "linger.ms": cfg.linger_ms,
            "compression.type": cfg.compression,
            "delivery.timeout.ms": int(cfg.write_timeout_s * 1000),
            "message.max.bytes": max(1_000_000, cfg.chunk_bytes + _FRAME_OVERHEAD + 1024),
            "socket.connection.setup.timeout.ms": 10_000,
            "error_cb": self._error_cb,
        }
        conf.update(cfg.client_config)
        conf.update(cfg.producer_config)
        conf.update({"acks": "all", "enable.idempotence": True})  # not overridable
        self._producer = Producer(with_logger(conf))
        self._producer_broken = False
        self._stop_polling = threading.Event()
        producer, stop = self._producer, self._stop_polling

        def poll_loop() -> None:  # serves delivery callbacks for every writer thread
            while not stop.is_set():
                producer.poll(0.05)

        self._poller = threading.Thread(target=poll_loop, name=f"wal-poll-{self.name}", daemon=True)
        self._poller.start()
        return self._producer

    def _stop_poller(self) -> None:
        self._stop_polling.set()
        if self._poller is not None:
            self._poller.join(timeout=5)
            self._poller = None

    # -- topics ------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise WalClosedError(f"WAL {self.name!r} is closed")

    def _topics(self, timeout_s: float) -> list[str]:
        try:
            md = self._admin_client().list_topics(timeout=max(0.1, timeout_s))
        except KafkaException as exc:
            raise WalWriteTimeoutError(
                f"WAL {self.name!r}: broker metadata unavailable within {timeout_s:.1f}s: {exc}"
            ) from exc
        return list(md.topics)

    def _layout(self, timeout_s: float) -> tuple[list[Segment], dict[int, str]]:
        segs, markers = segments.parse_topics(
            self._topics(timeout_s), self.config.topic_prefix, self.name
        )
        if markers:
            self._threshold_ms = max(self._threshold_ms, max(markers))
        return segs, markers

    def _create_topic(self, topic: str, timeout_s: float) -> None:
        configs = {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete"}
        new = NewTopic(topic, 1, self.config.replication_factor, config=configs)
        futures = self._admin_client().create_topics([new], operation_timeout=timeout_s)
        try:
            futures[topic].result(timeout=max(0.1, timeout_s))
        except KafkaException as exc:
            if exc.args and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return
            raise WalWriteError(f"WAL {self.name!r}: cannot create topic {topic}: {exc}") from exc
        except TimeoutError as exc:
            raise WalWriteTimeoutError(
                f"WAL {self.name!r}: creating topic {topic} took over {timeout_s:.1f}s"
            ) from exc

    def _segment_for(self, time_ms: int, deadline: float) -> Segment:
        with self._segment_lock:
            cur = self._current
            if cur is not None and time_ms < cur.end_ms and cur.end_ms > self._threshold_ms:
                return cur
            if cur is None:
                # A new writer continues the newest segment if it still covers time_ms,
                # so write order across writer restarts equals segment order.
                segs, _ = self._layout(deadline - time.monotonic())
                if segs and segs[-1].end_ms > self._threshold_ms and time_ms < segs[-1].end_ms:
                    self._current = segs[-1]
                    return segs[-1]
                # Never reuse a name of a segment that exists or is being deleted.
                floor = max([s.end_ms for s in segs] + [0])
            else:
                floor = cur.end_ms
            interval = self.config.rolling_interval_ms
            start = max(segments.aligned_start(time_ms, interval), floor)
            end = max(start + interval, time_ms + 1)
            seg = Segment(start, end, segments.segment_topic(
                self.config.topic_prefix, self.name, start, end))
            self._create_topic(seg.topic, deadline - time.monotonic())
            self._current = seg
            return seg

    # -- the contract ------------------------------------------------------------

    def write(self, record: bytes, time_ms: int) -> RecordHandle:
        """Store ``record``; return its handle once every frame is acknowledged."""
        future = self.write_async(record, time_ms)
        try:
            return future.result(timeout=self.config.write_timeout_s + 5.0)
        except FutureTimeout:
            raise WalWriteTimeoutError(
                f"WAL {self.name!r}: no acknowledgement within {self.config.write_timeout_s}s"
            ) from None

    @property
    def pipelines_writes(self) -> bool:
        return True

    @property
    def strict(self) -> bool:
        return self.config.strict

    def write_async(self, record: bytes, time_ms: int) -> Future[RecordHandle]:
        """Enqueue ``record`` and return a Future of its handle (pipelined writes).

        The record is durable only when the Future resolves; until then the
        caller must treat it as not stored. Records of one caller keep their
        order. Validation errors raise at once; broker errors resolve the Future
        with :class:`WalWriteError` / :class:`WalWriteTimeoutError`.
        """
        self._check_open()
        if not isinstance(record, bytes | bytearray | memoryview):
            raise TypeError(f"WAL records are bytes, got {type(record).__name__}")
        if len(record) > self.config.max_record_bytes:
            raise RecordTooLargeError(len(record), self.config.max_record_bytes)
        if time_ms < 0:
            raise WalWriteError(f"time_ms must be >= 0, got {time_ms}")
        if time_ms < self._threshold_ms:
            raise WalWriteError(
                f"WAL {self.name!r}: record time {time_ms} is older than the clean threshold "
                f"{self._threshold_ms}; it would be dropped at once, so it is refused"
            )
        deadline = time.monotonic() + self.config.write_timeout_s
        frames = encode_record(bytes(record), self.config.chunk_bytes)
        if self._producer is None:
            # Start the producer before the first segment topic exists: its broker
            # connection and producer id are then set up while the topic is being
            # created, not after it, and a receiver's first block waits on this write
            # (docs/decisions/wal-producer-setup.md).
            with self._produce_lock:
                self._check_open()  # a close() since the check above released the clients
                self._producer_client()
        seg = self._segment_for(time_ms, deadline)
        ack = DeliveryAck(self.name, seg.topic, _PARTITION, len(frames))
        with self._produce_lock:
            # Checked under the lock close() marks the WAL closed under: a frame
            # produced here is in the producer before close() flushes it.
            self._check_open()
            producer = self._producer_client()
            for i, frame in enumerate(frames):
                if i and killpoints.armed(_BETWEEN_CHUNKS):
                    # The chunks before are flushed first, so the crash leaves a torn
                    # record in the log, as a writer dying mid-record would.
                    producer.flush(self.config.write_timeout_s)
                    killpoints.kill_point(_BETWEEN_CHUNKS)
                while True:
                    try:
                        producer.produce(seg.topic, frame, partition=_PARTITION,
                                         timestamp=time_ms, on_delivery=ack.callback(i))
                        break
                    except BufferError:
                        if time.monotonic() > deadline:
                            raise WalBackpressureError(
                                f"WAL {self.name!r}: producer queue full for "
                                f"{self.config.write_timeout_s}s") from None
                        time.sleep(0.005)  # the poller thread drains the queue
        # The ack arrives on the poller thread; callers wait outside the lock, so
        # other writers pipeline behind this one.
        return ack.future

    def read(self, handle: RecordHandle) -> bytes:
        """The bytes at ``handle``; :class:`RecordNotFoundError` once it was cleaned.

        A record older than a threshold this instance has seen (its own ``clean``
        or a marker found by ``read_all``) counts as cleaned even while its
        segment still exists.
        """
        self._check_open()
        if handle.index != -1:
            raise WalError("handle has a batch index: read it through BatchedWriteAheadLog")
        segs, _ = segments.parse_topics([handle.topic], self.config.topic_prefix, self.name)
        if segs and segs[0].end_ms <= self._threshold_ms:
            # Every record of the segment is older than the threshold, and a clean
            # deletes the segment: answered here, never fetching a deleted topic.
            raise RecordNotFoundError(f"{handle}: cleaned (its segment ends at "
                                      f"{segs[0].end_ms} <= {self._threshold_ms})")
        record, ts = self._reader.read(handle)
        if ts < self._threshold_ms:
            raise RecordNotFoundError(f"{handle}: cleaned (older than {self._threshold_ms})")
        return record

    def read_all(self) -> Iterator[bytes]:
        """Every record not yet cleaned, in write order, from any process.

        Corrupt or foreign records are reported to ``on_corrupt`` (default: a
        warning) and counted in ``corrupt_records``, then skipped; with
        ``strict=True`` they raise instead.
        """
        return (record for record, _ts, _handle in self.iter_records())

    def iter_records(self) -> Iterator[tuple[bytes, int, RecordHandle]]:
        """Like :meth:`read_all`, also yielding each record's time and handle."""
        self._check_open()  # eagerly, not at the first next()
        progress = ReplayProgress()
        self._replay = progress  # replay_progress() follows this read from now on
        return self._iter_records(progress)

    def replay_progress(self) -> ReplayProgress | None:
        """The latest :meth:`read_all`'s progress in Kafka records (see
        :class:`~walstream.wal.base.ReplayProgress`); its total is known once the read has
        started (its first record asked for), None before any read."""
        return self._replay

    def _iter_records(self, progress: ReplayProgress
                      ) -> Iterator[tuple[bytes, int, RecordHandle]]:
        segs, _ = self._layout(self.config.read_timeout_s)
        thresh = self._threshold_ms
        segs = [seg for seg in segs if seg.end_ms > thresh]
        try:
            extents = self._reader.segment_extents([seg.topic for seg in segs], _PARTITION)
        except Exception as exc:  # a progress total is never worth failing the read
            log.warning("WAL %s: could not learn the segments' end offsets: %s", self.name, exc)
            extents = {}
        if all(seg.topic in extents for seg in segs):
            progress.total = sum(end - start for start, end in extents.values())

        for seg in segs:
            start, end = extents.get(seg.topic, (0, 2**63))
            before = progress.consumed

            def on_position(offset: int, start: int = start, end: int = end,
                            before: int = before) -> None:
                # Capped at the end taken at the start: records written since are
                # not in the total either.
                progress.consumed = before + max(0, min(offset, end) - start)

            for record, ts, first, chunks in self._reader.read_segment(
                seg.topic, _PARTITION, thresh, self._report_corrupt, self.config.strict,
                on_position
            ):
                yield record, ts, RecordHandle(seg.topic, _PARTITION, first, chunks)

    def _report_corrupt(self, exc: CorruptRecordError) -> None:
        self.corrupt_records += 1
        if self._on_corrupt is not None:
            self._on_corrupt(exc)
        else:
            log.warning("WAL %s: skipping a corrupt or foreign record: %s", self.name, exc)

    def follow(self, poll_timeout_s: float = 1.0) -> KafkaLogFollower:
        """A follower of this log (see :mod:`walstream.wal.follow`): ``read_all``'s records,
        then the later ones. Corrupt records go where ``read_all`` sends them (raised
        when ``strict``); closing this log closes its followers."""
        self._check_open()
        follower = KafkaLogFollower(self.bootstrap_servers, self.name, self.config,
                                    self._report_corrupt, poll_timeout_s, self._threshold_ms)
        self._followers.add(follower)
        return follower

    def clean(self, thresh_time_ms: int, wait_for_completion: bool) -> None:
        """Drop records older than ``thresh_time_ms`` (whole segments reclaimed).

        With ``wait_for_completion=False`` the deletion runs on a background
        thread; the threshold applies to this instance's reads at once.
        """
        self._check_open()
        with self._segment_lock:
            self._threshold_ms = max(self._threshold_ms, thresh_time_ms)
            if self._current is not None and self._current.end_ms <= thresh_time_ms:
                self._current = None  # never write into a segment about to be deleted
        fut: Future[None] = self._cleaner.submit(self._clean_now, thresh_time_ms)
        if wait_for_completion:
            fut.result()
        else:
            fut.add_done_callback(_log_failure(self.name))

    def _clean_now(self, thresh: int) -> None:
        timeout = self.config.admin_timeout_s
        segs, markers = self._layout(timeout)
        cfg = self.config
        guard = self._delete_guard or (lambda: None)
        # Step 1: the threshold first, so no reader sees old records after step 2.
        if not markers or max(markers) < thresh:
            guard()
            self._create_topic(segments.marker_topic(cfg.topic_prefix, self.name, thresh), timeout)
        # Step 2: whole segments whose every record is older than the threshold.
        doomed = [s.topic for s in segs if s.end_ms <= thresh]
        # Step 3: older markers (the newest one is kept).
        newest = max([thresh, *markers])
        doomed += [t for m, t in markers.items() if m < newest]
        if doomed:
            # No consumer of this process may know a topic as it is deleted: librdkafka
            # crashes on the broker's answer to its Fetch (see release_topics).
            release_topics(doomed)
            guard()
            futures = self._admin_client().delete_topics(doomed, operation_timeout=timeout)
            for topic, f in futures.items():
                try:
                    f.result(timeout=timeout)
                except KafkaException as exc:
                    code = exc.args[0].code() if exc.args else None
                    if code != KafkaError.UNKNOWN_TOPIC_OR_PART:
                        raise WalError(f"WAL {self.name!r}: cannot delete {topic}: {exc}") from exc

    def segments(self) -> list[Segment]:
        """The live segment topics, oldest first (for inspection and tests)."""
        self._check_open()
        return self._layout(self.config.admin_timeout_s)[0]

    def close(self) -> None:
        with self._produce_lock:
            if self._closed:
                return
            self._closed = True
        try:
            if self._producer is not None:
                left = self._producer.flush(self.config.write_timeout_s)
                if left:
                    log.error("WAL %s: %d frames unacknowledged at close", self.name, left)
        finally:
            self._stop_poller()
            for follower in list(self._followers):
                follower.close()
            self._cleaner.shutdown(wait=True)
            self._reader.close()
            # Release the librdkafka clients now rather than when this object is
            # collected: until then a closed WAL's clients would keep reconnecting to
            # a broker that has gone.
            # Safe: writes check _closed first, and the poller and cleaner are done.
            with self._produce_lock:
                self._producer = None
                self._admin = None


def _log_failure(name: str) -> Any:
    def done(fut: Future[None]) -> None:
        exc = fut.exception()
        if exc is not None:
            log.error("WAL %s: background clean failed: %s", name, exc)

    return done
