"""read_exactly_once: step 3 and step 6 of the KafkaSink protocol (driver/sink/kafka_sink.py).

The reader trusts no record: a record that carries KafkaSink headers it cannot
parse (a foreign producer, a truncated header set, a number that is not one) is
skipped and reported, never raised on, so one such record cannot stop every later
reader of the topic. Its memory is bounded per attempt, over all attempts and in
the number of attempts open at once; past a bound it raises
:class:`SinkReadLimitError` rather than grow.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from walstream.driver.sink.errors import SinkReadLimitError
from walstream.driver.sink.output_writer import MAX_WRITER_BYTES
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
from walstream.kafka_logging import with_logger

#: Defaults of the reader's bounds: the uncommitted bytes one attempt may hold, and
#: all attempts together. A record counts its key, value and a fixed overhead.
DEFAULT_MAX_ATTEMPT_BYTES = 256 * 1024 * 1024
DEFAULT_MAX_BUFFERED_BYTES = 1024 * 1024 * 1024
RECORD_OVERHEAD_BYTES = 96
_MAX_ATTEMPT_ID_BYTES = 64
_MAX_DIGITS = 19  # a long


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
    writer: str = ""  # the writer identity ("": a writer from before identities)

    @property
    def reason(self) -> str:
        """Why the attempt was not used: ``fenced``, ``rerun`` or ``incomplete``."""
        if self.fenced:
            return "fenced"
        return "rerun" if self.rerun else "incomplete"


@dataclass(frozen=True)
class SkippedRecord:
    """A record :func:`read_exactly_once` skipped because it carries KafkaSink headers
    it cannot parse: not written by a KafkaSink, or damaged."""

    kafka_partition: int
    offset: int
    detail: str

    @property
    def reason(self) -> str:
        return "malformed"


Skipped = SkippedAttempt | SkippedRecord  # what on_skipped is told of


@dataclass(frozen=True)
class _Record:
    writer: bytes
    batch: int
    part: int
    attempt: bytes
    epoch: int
    seq: int | None  # None: a commit marker
    count: int  # a marker's count


def _headers(raw: Any) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for k, v in raw or []:
        out[str(k)] = v.encode() if isinstance(v, str) else bytes(v or b"")
    return out


def _number(h: Mapping[str, bytes], name: str) -> int:
    raw = h[name]
    if not raw.isdigit() or len(raw) > _MAX_DIGITS:
        raise ValueError(f"header {name} is not a number: {raw[:24]!r}")
    return int(raw)


def _writer(h: Mapping[str, bytes]) -> bytes:
    writer = h.get(H_WRITER, b"")
    if len(writer) > MAX_WRITER_BYTES:
        raise ValueError(f"header {H_WRITER} is over {MAX_WRITER_BYTES} bytes")
    return writer


def _parse(h: Mapping[str, bytes]) -> _Record:
    """The attempt record or marker ``h`` describes; ValueError (or KeyError for a
    missing header) when it is not a well-formed one."""
    attempt = h[H_ATTEMPT]
    if not attempt or len(attempt) > _MAX_ATTEMPT_ID_BYTES:
        raise ValueError(f"header {H_ATTEMPT} is empty or over {_MAX_ATTEMPT_ID_BYTES} bytes")
    if (H_COMMIT in h) == (H_SEQ in h):
        raise ValueError(f"a record has exactly one of {H_SEQ} and {H_COMMIT}")
    marker = H_COMMIT in h
    return _Record(_writer(h), _number(h, H_BATCH), _number(h, H_PART), attempt,
                   _number(h, H_EPOCH) if H_EPOCH in h else 0,
                   None if marker else _number(h, H_SEQ),
                   _number(h, H_COMMIT) if marker else 0)


class _Buffer:
    """The records of attempts started and not yet committed, with the reader's
    bounds enforced on every add."""

    def __init__(self, max_attempts: int, max_attempt_bytes: int,
                 max_buffered_bytes: int) -> None:
        self.max_attempts = max_attempts
        self.max_attempt_bytes = max_attempt_bytes
        self.max_buffered_bytes = max_buffered_bytes
        # Per attempt, its records by sequence number: a duplicate overwrites itself.
        self.records: dict[tuple[bytes, int, int, bytes],
                           dict[int, tuple[bytes | None, bytes | None]]] = {}
        self.sizes: dict[tuple[bytes, int, int, bytes], int] = {}
        # Started attempts whose records are not kept: void (True) or the re-run
        # of a partition already read (False).
        self.unkept: dict[tuple[bytes, int, int, bytes], bool] = {}
        self.total = 0

    def open(self, ident: tuple[bytes, int, int, bytes]) -> None:
        if len(self.records) + len(self.unkept) >= self.max_attempts:
            raise SinkReadLimitError("max_pending_attempts", self.max_attempts,
                                     "too many uncommitted attempts open at once")

    def add(self, ident: tuple[bytes, int, int, bytes], seq: int,
            key: bytes | None, value: bytes | None) -> None:
        kept = self.records.setdefault(ident, {})
        size = len(key or b"") + len(value or b"") + RECORD_OVERHEAD_BYTES
        old = kept.get(seq)
        if old is not None:
            size -= len(old[0] or b"") + len(old[1] or b"") + RECORD_OVERHEAD_BYTES
        attempt_bytes = self.sizes.get(ident, 0) + size
        if attempt_bytes > self.max_attempt_bytes:
            raise SinkReadLimitError(
                "max_attempt_bytes", self.max_attempt_bytes,
                f"attempt {ident[3].decode(errors='replace')} of batch {ident[1]} part "
                f"{ident[2]} holds more uncommitted output than one attempt may")
        if self.total + size > self.max_buffered_bytes:
            raise SinkReadLimitError("max_buffered_bytes", self.max_buffered_bytes,
                                     "uncommitted attempts hold more output than allowed")
        kept[seq] = (key, value)
        self.sizes[ident] = attempt_bytes
        self.total += size

    def pop(self, ident: tuple[bytes, int, int, bytes]
            ) -> dict[int, tuple[bytes | None, bytes | None]] | None:
        self.total -= self.sizes.pop(ident, 0)
        return self.records.pop(ident, None)


def read_exactly_once(bootstrap_servers: str, topic: str, timeout_s: float = 30.0,
                      max_pending_attempts: int = 100_000,
                      kafka_conf: Mapping[str, str] | None = None,
                      on_skipped: Callable[[Skipped], None] | None = None,
                      max_attempt_bytes: int = DEFAULT_MAX_ATTEMPT_BYTES,
                      max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES,
                      ) -> Iterator[tuple[int, bytes | None, bytes | None]]:
    """Step 3: ``(batch_ms, key, value)`` of every committed attempt, once per
    ``(writer, batch, part)``, reading the topic from the start to its current end.
    Writers are independent: one writer's attempts never stand for another's, and a
    fence voids only its own writer's older epochs.

    ``kafka_conf``: librdkafka settings (SASL, TLS, ...); default: the running
    SparkContext's ``spark.walstream.kafka.*``. ``on_skipped`` is told of each
    attempt whose marker was read and that was not used (a :class:`SkippedAttempt`:
    a re-run of a partition already read, an attempt lacking records its marker
    counts, or an attempt void by a fence, step 6), and of each record with
    KafkaSink headers it cannot parse (a :class:`SkippedRecord`). Records with no
    KafkaSink header are not KafkaSink's and are passed over silently.

    Memory: the records of attempts started and not yet committed, at most
    ``max_attempt_bytes`` for one attempt and ``max_buffered_bytes`` for all; at most
    ``max_pending_attempts`` attempts open (kept or not); one fence epoch per
    (partition, writer); one entry per committed (writer, batch, part). Past a bound:
    :class:`SinkReadLimitError`."""
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
        buf = _Buffer(max_pending_attempts, max_attempt_bytes, max_buffered_bytes)
        done: set[tuple[bytes, int, int]] = set()
        fence: dict[tuple[int, bytes], int] = {}  # (partition, writer) -> highest epoch

        def skip(item: Skipped) -> None:
            if on_skipped is not None:
                on_skipped(item)

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
            if H_FENCE not in h and H_BATCH not in h:
                continue  # not written by KafkaSink
            try:
                if H_FENCE in h:
                    if H_BATCH in h:
                        raise ValueError(f"a record has both {H_FENCE} and {H_BATCH}")
                    where = (kafka_part, _writer(h))
                    fence[where] = max(fence.get(where, 0), _number(h, H_FENCE))
                    continue
                rec = _parse(h)
            except (KeyError, ValueError) as exc:
                detail = f"missing header {exc}" if isinstance(exc, KeyError) else str(exc)
                skip(SkippedRecord(kafka_part, int(msg.offset() or 0), detail))
                continue
            ident = (rec.writer, rec.batch, rec.part, rec.attempt)
            slot = (rec.writer, rec.batch, rec.part)
            if rec.seq is None:  # a commit marker
                kept = buf.pop(ident)
                was_void = buf.unkept.pop(ident, None)
                # No record of the attempt read before: the marker is its first.
                void = (rec.epoch < fence.get((kafka_part, rec.writer), 0)
                        if kept is None and was_void is None else bool(was_void))
                records = kept or {}
                count = rec.count
                if void or slot in done or len(records) != count or (
                        count and max(records) != count - 1):
                    # Fenced, a re-run of a committed partition, or incomplete.
                    skip(SkippedAttempt(rec.batch, rec.part,
                                        rec.attempt.decode(errors="replace"),
                                        len(records), count, slot in done, void, rec.epoch,
                                        rec.writer.decode(errors="replace")))
                    continue
                done.add(slot)
                for seq in range(count):
                    key, value = records[seq]
                    yield rec.batch, key, value
                continue
            if ident in buf.records:
                if slot in done:  # another attempt of its slot committed: a re-run now
                    buf.pop(ident)
                    buf.unkept[ident] = False
                else:
                    buf.add(ident, rec.seq, msg.key(), msg.value())
                continue
            if ident in buf.unkept:
                continue
            # The attempt's first record: the fence read so far decides it for good.
            void = rec.epoch < fence.get((kafka_part, rec.writer), 0)
            buf.open(ident)
            if void or slot in done:
                buf.unkept[ident] = void
            else:
                buf.add(ident, rec.seq, msg.key(), msg.value())
    finally:
        consumer.close()
